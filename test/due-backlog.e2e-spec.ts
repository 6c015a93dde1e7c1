import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, post, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const RUNS = 300;
const SLOTS = 5;
/** Long: a backlog that drained one batch of free slots per poll (15 per 5 s here) would take 100 s. */
const POLL_MS = 5_000;
/** How long after their due time all of them may take to start: four poll intervals (about 7 s here, loaded). */
const DRAINED_WITHIN_MS = 4 * POLL_MS;

const DONE = `SELECT count(*)::int AS n FROM cyclium_episodes
               WHERE status = 'done' AND trigger_ref->'payload'->>'batch' = $1`;
/** Each run's start against its due time, by the database clock. */
const LATENESS = `
  SELECT (extract(epoch FROM max(e.started_at - r.not_before)) * 1000)::float8 AS latest,
         (extract(epoch FROM min(e.started_at - r.not_before)) * 1000)::float8 AS earliest
    FROM cyclium_episodes e JOIN cyclium_trigger_requests r ON r.episode_id = e.id
   WHERE e.trigger_ref->'payload'->>'batch' = $1`;

/**
 * Due work drains at the speed its slots free, with real node processes: 300 runs for later, due
 * at one instant, on three nodes with five slots each and a poll interval of 5 s; each episode
 * takes milliseconds, so they all start within seconds of their due time, not one batch of free
 * slots (15) per poll interval.
 */
describe('a backlog of due requests', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_TRIGGER_POLL_MS: String(POLL_MS),
    DEMO_REBALANCER_SLOTS: String(SLOTS),
  };
  let nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes = await Promise.all(
      ['due-1', 'due-2', 'due-3'].map((id) => startNode(database.url, id, env)),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('starts every due run within seconds, not one batch of free slots per poll interval', async () => {
    const batch = 'drain';
    const { rows } = await database.db.query<{ at: Date }>(
      `SELECT now() + interval '12 seconds' AS at`,
    );
    const runAt = rows[0].at.toISOString();
    const body = (i: number) => ({
      payload: { resource: `due-${i}`, batch, stepMs: 10, steps: 1 },
      runAt,
    });
    const path = '/actors/resource_rebalancer/rebalance';
    const trigger = (i: number) => post<{ status: string }>(nodes[i % 3], path, body(i));
    for (let i = 0; i < RUNS; i += 20) {
      const answers = await Promise.all(Array.from({ length: 20 }, (_, j) => trigger(i + j)));
      expect(answers.map((answer) => answer.status)).toEqual(Array(20).fill('deferred'));
    }
    const early = await database.db.query<{ early: boolean }>(
      `SELECT now() < $1::timestamptz AS early`,
      [runAt],
    );
    expect(early.rows[0].early).toBe(true);

    const done = async () => (await database.db.query<{ n: number }>(DONE, [batch])).rows[0].n;
    const untilDue = Date.parse(runAt) - Date.now();
    const allDone = async () => (await done()) === RUNS;
    const drained = waitFor(
      `${RUNS} runs done`,
      allDone,
      untilDue + DRAINED_WITHIN_MS + 5_000,
      200,
    );
    await drained.catch(async (error: Error) => {
      throw new Error(`${error.message}: ${await done()} of ${RUNS} done`);
    });
    const lateness = await database.db.query<{ latest: number; earliest: number }>(LATENESS, [
      batch,
    ]);
    const { latest, earliest } = lateness.rows[0];
    expect(earliest).toBeGreaterThanOrEqual(0);
    expect(latest).toBeLessThan(DRAINED_WITHIN_MS);
  });
});
