import { afterAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

const BUS_NODE = fileURLToPath(new URL('./fixtures/dist/bus-node.js', import.meta.url));

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
    const node = await startNodeProcess(BUS_NODE, database.url, {
      env: { CYCLIUM_NODE_ID: 'fixed-node', BUS_ACTORS: 'slow', BUS_STEP_MS: '1500', BUS_STALE_MS: '2000' },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    nodes.push(node);
    return node;
  };

  const episodes = async () =>
    (await database.db.query<{ id: string; status: string; attempts: number }>(`SELECT id, status, attempts FROM cyclium_episodes WHERE actor_id = 'bus_slow'`))
      .rows;

  it('restarts the episodes a kill -9 left running once the same identity is back and beating', async () => {
    const first = await boot();
    for (let i = 0; i < 3; i++) {
      const response = await fetch(`http://127.0.0.1:${first.port}/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'test.slow', eventId: `same-id-${i}`, payload: { n: i } }),
      });
      expect(response.status).toBe(202);
    }
    await waitFor('three running episodes', async () => (await episodes()).filter((e) => e.status === 'running').length === 3, 15_000);
    await first.stop('SIGKILL');

    await boot();
    await waitFor('all three restarted and done', async () => (await episodes()).every((e) => e.status === 'done'), 30_000, 200);
    const rows = await episodes();
    expect(rows).toHaveLength(3);
    // Each ran a second time: recovery took it (attempts + 1), not a fresh trigger.
    expect(rows.every((e) => e.attempts >= 1)).toBe(true);
  });
});
