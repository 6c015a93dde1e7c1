import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';

const EVENTS = 400;

describe('lifecycle events commit with the state they announce', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const count = async (sql: string) => (await database.db.query(sql)).rows[0].n as number;

  /**
   * Every monitor episode, its status, and how many of each lifecycle event its id appears in:
   * a terminal status has exactly its one terminal event, and a live episode has none.
   */
  async function mismatches(): Promise<unknown[]> {
    const { rows } = await database.db.query(`
      SELECT e.id, e.status,
             count(*) FILTER (WHERE v.type = 'episode.completed')::int AS completed,
             count(*) FILTER (WHERE v.type = 'episode.failed')::int AS failed,
             count(*) FILTER (WHERE v.type = 'episode.canceled')::int AS canceled
        FROM cyclium_episodes e
        LEFT JOIN cyclium_events v ON v.payload->>'episodeId' = e.id::text
       WHERE e.actor_id = 'resource_monitor'
       GROUP BY e.id, e.status`);
    const expected = (status: string) => ({
      completed: status === 'done' || status === 'partially_failed' ? 1 : 0,
      failed: status === 'failed' ? 1 : 0,
      canceled: status === 'canceled' ? 1 : 0,
    });
    return rows.filter((r) => {
      const want = expected(r.status);
      return (
        r.completed !== want.completed || r.failed !== want.failed || r.canceled !== want.canceled
      );
    });
  }

  it('holds when a node is killed with kill -9 in the middle of hundreds of episodes, and after a peer recovers them', async () => {
    // A durable consumer of every type (its position stored, its node not up): every end writes
    // its event, whichever node runs it and whenever.
    await database.db.query(
      `INSERT INTO cyclium_bus_positions (channel, consumer, position, type)
       VALUES ($1, 'lifecycle-outbox-reader', pg_current_snapshot(), '*')`,
      [busChannel(null, null)],
    );
    const victim = await startNode(database.url, 'node-victim', {
      ...FAST_RECOVERY,
      DEMO_JITTER_MS: '0',
    });
    nodes.push(victim);
    const posts = Array.from({ length: EVENTS }, (_, i) =>
      fetch(`http://127.0.0.1:${victim.port}/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          type: 'resource.updated',
          payload: { resource: `outbox-${i}`, usage: i % 100 },
        }),
      }).then(
        (r) => r.status,
        () => 0, // the victim may die before it answers
      ),
    );
    await waitFor(
      'episodes finishing on the victim',
      async () =>
        (await count(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE status = 'done'`)) >=
        50,
      30_000,
      10,
    );
    await victim.stop('SIGKILL');
    await Promise.all(posts);

    const { rows } = await database.db.query(
      `SELECT status, count(*)::int AS n FROM cyclium_episodes GROUP BY 1`,
    );
    const byStatus = Object.fromEntries(rows.map((r) => [r.status, r.n]));
    expect(byStatus.done).toBeGreaterThanOrEqual(50);
    expect(await mismatches()).toEqual([]);

    // A peer restarts the episodes the victim left running (restart policy); each gets its event, once.
    nodes.push(await startNode(database.url, 'node-peer'));
    await waitFor(
      'the orphans to be recovered',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status IN ('running', 'queued')`,
        )) === 0,
      60_000,
      250,
    );
    expect(await mismatches()).toEqual([]);
    process.stdout.write(`lifecycle-outbox: at the kill ${JSON.stringify(byStatus)}\n`);
  }, 120_000);
});
