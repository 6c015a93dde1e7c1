import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  episodeRow,
  rebalanceOn,
  sideEffects,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const INITIAL_MS = 1_500;
/** Short, so a whole-cluster stop outlasts it: a backoff or a sleep must not expire however long it waited. */
const TTL_MS = 2_000;

/**
 * Retries with backoff and durable sleeps across real node processes (the demo's
 * `rebalance_retried`: three attempts, 1.5 s then 3 s): an episode whose third step throws twice
 * ends `done` with steps 1 and 2 run once; a backoff outlives the node that wrote it (`kill -9`)
 * and the whole cluster; a sleep outlives its node.
 */
describe('retries across nodes', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_TRIGGER_POLL_MS: '500',
    DEMO_RETRY_INITIAL_MS: String(INITIAL_MS),
    DEMO_TRIGGER_TTL_MS: String(TTL_MS),
  };
  const nodes: DemoNode[] = [];
  const boot = async (id: string) => {
    const node = await startNode(database.url, id, env);
    nodes.push(node);
    return node;
  };
  let a: DemoNode;
  let b: DemoNode;

  beforeAll(async () => {
    [a, b] = await Promise.all([boot('retry-a'), boot('retry-b')]);
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const waiting = (id: string) => waitForStatus(database.db, id, 'waiting', 20_000);

  /** How long each wake-up waited against its due time, by the database clock. */
  async function wakeUps(id: string): Promise<Array<{ due: number; waited: number }>> {
    const { rows } = await database.db.query<{ due: number; waited: number }>(
      `SELECT (extract(epoch FROM not_before - inserted_at) * 1000)::float8 AS due, (extract(epoch FROM claimed_at - inserted_at) * 1000)::float8 AS waited
         FROM cyclium_trigger_requests WHERE episode_id = $1 AND status = 'completed' ORDER BY inserted_at`,
      [id],
    );
    return rows;
  }

  it('ends done after three attempts when the third step throws twice; steps 1 and 2 ran once; each backoff at least its delay', async () => {
    const id = await rebalanceOn(
      a,
      { resource: 'retry-1', stepMs: 20, failAtStep: 3, failTimes: 2 },
      'rebalance_retried',
    );
    const row = await waitForStatus(database.db, id, 'done', 30_000);
    expect(row.retries).toBe(2);
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      drain: 1,
      'move:failed': 2,
      move: 1,
      verify: 1,
      report: 1,
    });
    const waits = await wakeUps(id);
    expect(waits.map((w) => Math.round(w.due))).toEqual([INITIAL_MS, INITIAL_MS * 2]);
    for (const w of waits) expect(w.waited).toBeGreaterThanOrEqual(w.due);
  });

  it('resumes on another node when the one that wrote the backoff is killed during it', async () => {
    const id = await rebalanceOn(
      a,
      { resource: 'retry-2', stepMs: 20, failAtStep: 2, failTimes: 1 },
      'rebalance_retried',
    );
    await waiting(id);
    await a.stop('SIGKILL');
    const row = await waitForStatus(database.db, id, 'done', 30_000);
    expect(row.owner_node).toBe('retry-b');
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      'drain:failed': 1,
      drain: 1,
      move: 1,
      verify: 1,
      report: 1,
    });
  });

  it('loses nothing when the whole cluster stops during a backoff and stays down past the request TTL', async () => {
    const id = await rebalanceOn(
      b,
      { resource: 'retry-3', stepMs: 20, failAtStep: 4, failTimes: 1 },
      'rebalance_retried',
    );
    await waiting(id);
    await b.stop('SIGKILL');
    const { not_before: due } = (
      await database.db.query(
        `SELECT not_before FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [id],
      )
    ).rows[0];
    await waitFor(
      'the backoff to be overdue by more than the TTL with no node up',
      async () =>
        (
          await database.db.query(
            `SELECT now() > $1::timestamptz + make_interval(secs => $2) AS past`,
            [due, (TTL_MS + 500) / 1000],
          )
        ).rows[0].past,
    );
    expect((await episodeRow(database.db, id)).status).toBe('waiting');
    await boot('retry-c');
    const row = await waitForStatus(database.db, id, 'done', 30_000);
    expect(row.owner_node).toBe('retry-c');
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      drain: 1,
      move: 1,
      'verify:failed': 1,
      verify: 1,
      report: 1,
    });
  }, 120_000);

  it('resumes a sleeping episode on another node when the one it slept on is killed', async () => {
    const [c] = nodes.slice(-1) as [DemoNode];
    await boot('retry-d');
    const id = await rebalanceOn(
      c,
      { resource: 'sleep-1', stepMs: 20, sleepMs: 2_000 },
      'rebalance_retried',
    );
    await waiting(id);
    await c.stop('SIGKILL');
    const row = await waitForStatus(database.db, id, 'done', 30_000);
    expect(row.owner_node).toBe('retry-d');
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      drain: 1,
      move: 1,
      verify: 1,
      report: 1,
    });
    const { rows } = await database.db.query(
      `SELECT name FROM cyclium_episode_steps WHERE episode_id = $1 AND kind = 'step' ORDER BY step_no`,
      [id],
    );
    expect(rows.map((r) => r.name)).toEqual([
      'plan',
      'drain',
      'sleep:pause',
      'move',
      'verify',
      'report',
    ]);
  });

  it('loses no sleeping episode when the whole cluster stops during the sleep and stays down past the request TTL, the same node identity coming back', async () => {
    const [d] = nodes.slice(-1) as [DemoNode];
    const id = await rebalanceOn(
      d,
      { resource: 'sleep-2', stepMs: 20, sleepMs: 1_500 },
      'rebalance_retried',
    );
    await waiting(id);
    await d.stop('SIGKILL');
    const { not_before: due } = (
      await database.db.query(
        `SELECT not_before FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [id],
      )
    ).rows[0];
    await waitFor(
      'the sleep to be overdue by more than the TTL with no node up',
      async () =>
        (
          await database.db.query(
            `SELECT now() > $1::timestamptz + make_interval(secs => $2) AS past`,
            [due, (TTL_MS + 500) / 1000],
          )
        ).rows[0].past,
    );
    expect((await episodeRow(database.db, id)).status).toBe('waiting');
    // The killed node's identity comes back as a new process: it takes the identity over and resumes the episode.
    await boot('retry-d');
    const row = await waitForStatus(database.db, id, 'done', 30_000);
    expect(row.owner_node).toBe('retry-d');
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      drain: 1,
      move: 1,
      verify: 1,
      report: 1,
    });
  }, 120_000);
});
