import { afterAll, describe, expect, it } from '@jest/globals';
import { startBusNode } from './support/bus-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * The library's default configuration (claims off) with a fixed node identity: a node killed
 * mid-episode and restarted at once under the same identity beats again, and must still recover
 * the running episodes its previous process left (their phase is NULL).
 */
describe('recovery after a restart under the same identity, claims off', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const boot = async () => {
    const node = await startBusNode(database.url, 'fixed-node', 'slow', {
      BUS_STEP_MS: '1500',
      BUS_STALE_MS: '2000',
    });
    nodes.push(node);
    return node;
  };

  const episodes = async () =>
    (
      await database.db.query<{ id: string; status: string; attempts: number }>(
        `SELECT id, status, attempts FROM cyclium_episodes WHERE actor_id = 'bus_slow'`,
      )
    ).rows;

  it('restarts the episodes a kill -9 left running once the same identity is back and beating', async () => {
    const first = await boot();
    for (let i = 0; i < 3; i++)
      await post(first, '/events', {
        type: 'test.slow',
        eventId: `same-id-${i}`,
        payload: { n: i },
      });
    await waitFor(
      'three running episodes',
      async () => (await episodes()).filter((e) => e.status === 'running').length === 3,
      15_000,
    );
    await first.stop('SIGKILL');

    await boot();
    await waitFor(
      'all three restarted and done',
      async () => (await episodes()).every((e) => e.status === 'done'),
      30_000,
      200,
    );
    const rows = await episodes();
    expect(rows).toHaveLength(3);
    // Each ran a second time: recovery took it (attempts + 1), not a fresh trigger.
    expect(rows.every((e) => e.attempts >= 1)).toBe(true);
  });
});
