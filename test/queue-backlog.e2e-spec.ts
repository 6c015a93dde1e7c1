import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { post, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

/** resource_rebalancer runs 10 at once per node: the rest wait in the table. */
const SLOTS = 10;

describe('the table is the queue', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('a node killed with kill -9 and restarted under the same CYCLIUM_NODE_ID runs its queued backlog', async () => {
    const first = await startNode(database.url, 'node-q');
    nodes.push(first);
    const results = [];
    for (let i = 0; i < SLOTS + 3; i++) {
      results.push(
        await post<{ status: string; episodeId: string }>(
          first,
          '/actors/resource_rebalancer/rebalance',
          {
            payload: { resource: `backlog-${i}`, stepMs: 2_000 },
          },
        ),
      );
    }
    expect(results.map((r) => r.status)).toEqual([
      ...Array<string>(SLOTS).fill('started'),
      'queued',
      'queued',
      'queued',
    ]);
    const queued = results.filter((r) => r.status === 'queued').map((r) => r.episodeId);
    await first.stop('SIGKILL');

    // Nothing else could run them: no other node exists, and the queue lived in no memory.
    nodes.push(await startNode(database.url, 'node-q'));
    await waitFor(
      'the backlog to run on the restarted node',
      async () =>
        (
          await database.db.query(
            `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1) AND status = 'done'`,
            [queued],
          )
        ).rows[0].n === 3,
      60_000,
      250,
    );
    const { rows } = await database.db.query(
      `SELECT owner_node, attempts FROM cyclium_episodes WHERE id = ANY($1)`,
      [queued],
    );
    expect(rows).toEqual(Array.from({ length: 3 }, () => ({ owner_node: 'node-q', attempts: 0 })));
  }, 120_000);
});
