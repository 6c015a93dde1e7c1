import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { startBusNode } from './support/bus-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * Bus events that find every slot of their actor busy wait for one in memory, their event
 * unsettled, instead of as queued rows (ActorSlots' waiting triggers), with real node processes:
 * a node killed or stopped while they wait loses none of them (busy-pass covers a full node
 * passing them to a peer with a free slot).
 */
describe('bus events waiting for a slot', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  async function boot(id: string, env: Record<string, string> = {}): Promise<DemoNode> {
    const node = await startBusNode(database.url, id, 'held', env);
    nodes.push(node);
    return node;
  }

  const publish = (node: DemoNode, eventId: string) =>
    post(node, '/events', { type: 'test.held', eventId, payload: { n: 1 } });

  async function episodes(prefix: string) {
    const { rows } = await database.db.query<{ event_id: string; status: string }>(
      `SELECT trigger_ref->>'eventId' AS event_id, status FROM cyclium_episodes
        WHERE actor_id = 'bus_held' AND starts_with(trigger_ref->>'eventId', $1)`,
      [prefix],
    );
    return rows;
  }

  async function allDoneOnce(
    prefix: string,
    ids: readonly string[],
    timeoutMs = 40_000,
  ): Promise<void> {
    await waitFor(
      `${ids.length} ${prefix} episodes done`,
      async () => (await episodes(prefix)).filter((e) => e.status === 'done').length >= ids.length,
      timeoutMs,
      200,
    );
    const rows = await episodes(prefix);
    expect(rows.map((e) => e.event_id).sort()).toEqual([...ids].sort());
    expect(rows.every((e) => e.status === 'done')).toBe(true);
  }

  afterEach(async () => {
    await Promise.all(nodes.splice(0).map((node) => node.stop('SIGKILL')));
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  for (const [how, signal] of [
    ['kill -9', 'SIGKILL'],
    ['a drain (the whole cluster stopping)', 'SIGTERM'],
  ] as const) {
    it(`runs every waiting event once after ${how} of the only node and its restart`, async () => {
      const prefix = `${signal}-`;
      // Recovery restarts the episode the kill left running once the same identity beats again.
      const env = { BUS_HELD_STEP_MS: '400', BUS_STALE_MS: '2000' };
      const node = await boot('held-node', env);
      const ids = Array.from({ length: 12 }, (_, i) => `${prefix}${i}`);
      for (const id of ids) await publish(node, id);
      // One runs, the rest wait in memory: no queued row, no episode row at all.
      await waitFor(
        'the first held episode running',
        async () => (await episodes(prefix)).some((e) => e.status === 'running'),
        10_000,
      );
      const before = await episodes(prefix);
      expect(before.filter((e) => e.status === 'queued')).toEqual([]);
      expect(before.length).toBeLessThan(ids.length);

      await node.stop(signal);
      nodes.splice(nodes.indexOf(node), 1);
      await boot('held-node', env);
      await allDoneOnce(prefix, ids);
    });
  }
});
