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
  const byIdentity = (status: ClusterStatus, identity: string): Node | undefined =>
    status.nodes.find((n) => n.identity === identity);

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(
        ['status-1', 'status-2', 'status-3'].map((id) =>
          startNode(database.url, id, FAST_RECOVERY),
        ),
      )),
    );
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
    expect(status.active).toEqual(
      expect.arrayContaining([{ actorId: 'resource_rebalancer', status: 'running', count: 1 }]),
    );
    // Every node ran its boot sweep and recorded it on its row.
    await waitFor('each node to record a sweep', async () =>
      (await cluster(nodes[0])).nodes.every((n) => n.lastSweep?.result),
    );
    const cancel = await fetch(
      `http://127.0.0.1:${nodes[1].port}/ops/api/episodes/${running}/cancel`,
      { method: 'POST', headers: { 'x-cyclium-ops': '1' } },
    );
    expect(cancel.status).toBe(200);
    await waitFor('the canceled episode to count as finished', async () =>
      (await cluster(nodes[0])).finished.counts.some(
        (c) => c.actorId === 'resource_rebalancer' && c.status === 'canceled' && c.count === 1,
      ),
    );
  });

  it('lists every bus position with whether a live node hosts it, and drops only one nobody hosts', async () => {
    // An expectation renamed away: its position stays behind, holding the channel's events of its type.
    await database.db.query(
      `INSERT INTO cyclium_bus_positions (channel, consumer, position, type)
       VALUES ('cyclium_bus', 'gone_actor.renamed', pg_current_snapshot(), 'resource.updated')`,
    );
    const gone = 'gone_actor.renamed';
    const hosted = 'resource_monitor.check_resource_limits';
    const named = (read: ClusterStatus['busConsumers'], consumer: string) =>
      read.find((c) => c.consumer === consumer);
    const listed = (await waitFor('both positions in the status', async () => {
      const read = (await cluster(nodes[0])).busConsumers;
      return named(read, hosted) && named(read, gone) ? read : undefined;
    })) as ClusterStatus['busConsumers'];
    const channel = 'cyclium_bus';
    expect(named(listed, gone)).toMatchObject({ channel, type: 'resource.updated', hosted: false });
    expect(named(listed, hosted)).toMatchObject({
      channel,
      type: 'resource.updated',
      hosted: true,
    });

    const drop = (consumer: string) =>
      fetch(`http://127.0.0.1:${nodes[1].port}/ops/api/bus-consumers/drop`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-cyclium-ops': '1' },
        body: JSON.stringify({ channel, consumer }),
      });
    expect((await drop(hosted)).status).toBe(409);
    const dropped = await drop(gone);
    expect([dropped.status, await dropped.json()]).toEqual([200, { result: 'dropped' }]);
    expect((await drop(gone)).status).toBe(404);
    const stored = `SELECT consumer FROM cyclium_bus_positions WHERE channel = $1`;
    const left = (await database.db.query(stored, [channel])).rows.map((r) => r.consumer as string);
    expect(left).not.toContain(gone);
    expect(left).toContain(hosted);
    const listing = () =>
      nodes[0].get<{ items: Array<{ consumer: string }> }>('/ops/api/bus-consumers');
    await waitFor('the listing without it', async () =>
      (await listing()).items.every((c) => c.consumer !== gone),
    );
    expect((await listing()).items.map((c) => c.consumer).sort()).toEqual([...left].sort());
  });

  it(`marks a kill -9-ed node stale within 3 × nodeBeatIntervalMs (${3 * BEAT_MS} ms)`, async () => {
    const killed = nodes[2];
    const before = byIdentity(await cluster(nodes[0]), 'status-3');
    expect(before?.live).toBe(true);
    const killedAt = Date.now();
    await killed.stop('SIGKILL');
    await waitFor(
      'node 3 to be stale',
      async () => byIdentity(await cluster(nodes[0]), 'status-3')?.live === false,
      10_000,
      50,
    );
    const tookMs = Date.now() - killedAt;
    expect(tookMs).toBeLessThanOrEqual(3 * BEAT_MS);
    const after = await cluster(nodes[1]);
    expect(after.nodes.filter((n) => n.live).map((n) => n.identity)).toEqual([
      'status-1',
      'status-2',
    ]);
  });
});
