import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { CLUSTER_STATUS } from '../libs/cyclium/src/health/cluster-status.service.js';
import type { ClusterStatus } from '@cyclium/nestjs';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, rebalanceOn, startNode } from './support/demo-cluster.js';
import { freshDatabase, useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const BEAT_MS = Number(FAST_RECOVERY.DEMO_NODE_BEAT_MS);

type Node = ClusterStatus['nodes'][number];

const database = useDatabase();

describe('CycliumStatus.cluster() on three node processes', () => {
  const nodes: DemoNode[] = [];
  const cluster = async (node: DemoNode) => node.get<ClusterStatus>('/ops/api/cluster');
  const byIdentity = (status: ClusterStatus, identity: string): Node | undefined => status.nodes.find((n) => n.identity === identity);

  beforeAll(async () => {
    nodes.push(...(await Promise.all(['status-1', 'status-2', 'status-3'].map((id) => startNode(database.url, id, FAST_RECOVERY)))));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('lists each node with its running episodes and live claims, and the work by actor and status', async () => {
    const running = await rebalanceOn(nodes[1], { resource: 'status-long', stepMs: 3_000 });
    const status = await waitFor('node 2 to show its running episode', async () => {
      const read = await cluster(nodes[0]);
      return byIdentity(read, 'status-2')?.runningEpisodes === 1 ? read : undefined;
    }).then((read) => read as ClusterStatus);
    expect(status.nodes.map((n) => [n.identity, n.live, n.mode])).toEqual([
      ['status-1', true, 'full'],
      ['status-2', true, 'full'],
      ['status-3', true, 'full'],
    ]);
    expect(byIdentity(status, 'status-2')?.liveClaims).toBeGreaterThanOrEqual(1);
    expect(byIdentity(status, 'status-1')?.runningEpisodes).toBe(0);
    expect(status.active).toEqual(expect.arrayContaining([{ actorId: 'resource_rebalancer', status: 'running', count: 1 }]));
    // Every node ran its boot sweep and recorded it on its row.
    await waitFor('each node to record a sweep', async () => (await cluster(nodes[0])).nodes.every((n) => n.lastSweep?.result));
    const cancel = await fetch(`http://127.0.0.1:${nodes[1].port}/ops/api/episodes/${running}/cancel`, { method: 'POST', headers: { 'x-cyclium-ops': '1' } });
    expect(cancel.status).toBe(200);
    await waitFor('the canceled episode to count as finished', async () =>
      (await cluster(nodes[0])).finished.counts.some((c) => c.actorId === 'resource_rebalancer' && c.status === 'canceled' && c.count === 1),
    );
  });

  it(`marks a kill -9-ed node stale within 3 × nodeBeatIntervalMs (${3 * BEAT_MS} ms)`, async () => {
    const killed = nodes[2];
    const before = byIdentity(await cluster(nodes[0]), 'status-3');
    expect(before?.live).toBe(true);
    const killedAt = Date.now();
    await killed.stop('SIGKILL');
    await waitFor('node 3 to be stale', async () => byIdentity(await cluster(nodes[0]), 'status-3')?.live === false, 10_000, 50);
    const tookMs = Date.now() - killedAt;
    expect(tookMs).toBeLessThanOrEqual(3 * BEAT_MS);
    const after = await cluster(nodes[1]);
    expect(after.nodes.filter((n) => n.live).map((n) => n.identity)).toEqual(['status-1', 'status-2']);
  });
});

describe('the cluster status statement with a million finished episodes', () => {
  let client: pg.Client;

  beforeAll(async () => {
    client = new pg.Client({ connectionString: await freshDatabase() });
    await client.connect();
    // A million finished a day ago, a thousand live, a hundred finished within the window.
    await client.query(`
      INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, status, started_at, finished_at, inserted_at)
      SELECT 'actor-' || (g % 7), 'e', 'manual',
             CASE WHEN g <= 1000 THEN 'running' ELSE (ARRAY['done', 'failed', 'canceled'])[1 + g % 3] END,
             now() - interval '1 day',
             CASE WHEN g <= 1000 THEN NULL WHEN g <= 1100 THEN now() - interval '1 minute' ELSE now() - interval '1 day' END,
             now() - interval '1 day'
        FROM generate_series(1, 1001000) g`);
    await client.query('ANALYZE cyclium_episodes');
  }, 120_000);

  afterAll(async () => {
    await client?.end();
  });

  it('reads the live work and the window through indexes, never the history', async () => {
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${CLUSTER_STATUS}`, [2_000, 300_000]);
    const scans: Array<{ type: string; rows: number }> = [];
    const walk = (plan: Record<string, unknown>) => {
      if (plan['Relation Name'] === 'cyclium_episodes') scans.push({ type: plan['Node Type'] as string, rows: plan['Actual Rows'] as number });
      for (const child of (plan.Plans as Array<Record<string, unknown>> | undefined) ?? []) walk(child);
    };
    walk((rows[0] as { 'QUERY PLAN': Array<{ Plan: Record<string, unknown> }> })['QUERY PLAN'][0].Plan);
    expect(scans.length).toBeGreaterThan(0);
    for (const scan of scans) {
      expect(scan.type).not.toBe('Seq Scan');
      expect(scan.rows).toBeLessThanOrEqual(1_100);
    }
    const { rows: read } = await client.query<{ finished: Array<{ count: number }>; active: Array<{ count: number }> }>(CLUSTER_STATUS, [2_000, 300_000]);
    expect(read[0].finished.reduce((sum, c) => sum + c.count, 0)).toBe(100);
    expect(read[0].active.reduce((sum, c) => sum + c.count, 0)).toBe(1_000);
  });
});
