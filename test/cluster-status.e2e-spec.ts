import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { ClusterStatus } from '@cyclium/nestjs';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, rebalanceOn, startNode } from './support/demo-cluster.js';
import { useDatabase } from './support/database.js';
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
