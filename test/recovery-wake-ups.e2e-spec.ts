import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  journal,
  rebalanceOn,
  sideEffects,
  startNode,
  type Rebalance,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

/** Longer than staleAfterMs (FAST_RECOVERY: 3 s): the wait's own journal row is stale when the run wakes. */
const WAIT_MS = 4_500;
/** The step right after the wake-up: shorter than staleAfterMs; only an inherited quiet time makes it look orphaned. */
const SLOW_MS = 1_500;

/**
 * Recovery meets retries and sleeps, with claims off (the default) and real node processes: a run
 * that wakes from a wait longer than `staleAfterMs` starts its quiet time anew, so a peer's sweep
 * does not take it for an orphan while its first step after the wake-up runs — whether the wait
 * was a sleep or a retry's backoff, and whatever the recovery policy. Each episode runs to `done`
 * with each step once. The three run at once on two nodes, either of which may take each wake-up.
 */
describe('a run woken from a long wait is not an orphan (claims off, two nodes)', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_WORK_CLAIMS: 'off',
    DEMO_TRIGGER_POLL_MS: '300',
    DEMO_RETRY_INITIAL_MS: String(WAIT_MS),
  };
  const nodes: DemoNode[] = [];
  const started = new Map<string, string>();
  // The sleep takes step 3 (it is journaled as one): step 4, `move`, is the slow one.
  const slowAfterSleep = { stepMs: 20, sleepMs: WAIT_MS, slowAtStep: 4, slowStepMs: SLOW_MS };

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(['wake-a', 'wake-b'].map((id) => startNode(database.url, id, env)))),
    );
    const [a] = nodes as [DemoNode];
    // Started together: the file waits out one wait, not three.
    // `move` (step 3) fails once, then its retry is the slow step.
    const slowRetry = {
      stepMs: 20,
      failAtStep: 3,
      failTimes: 1,
      slowAtStep: 3,
      slowStepMs: SLOW_MS,
    };
    const runs: Array<[string, Rebalance, string]> = [
      ['sleep-fail', { resource: 'sleep-fail', ...slowAfterSleep }, 'rebalance_once'],
      ['sleep-restart', { resource: 'sleep-restart', ...slowAfterSleep }, 'rebalance'],
      ['backoff-restart', { resource: 'backoff-restart', ...slowRetry }, 'rebalance_retried'],
    ];
    for (const [name, payload, expectation] of runs)
      started.set(name, await rebalanceOn(a, payload, expectation));
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const once = { plan: 1, drain: 1, move: 1, verify: 1, report: 1 };
  const done = { status: 'done', errorClass: null, attempts: 0, taken: false };
  const ENDED = `SELECT * FROM cyclium_episodes WHERE id = $1 AND finished_at IS NOT NULL`;

  /** How the episode ended, whether a sweep took it, and how often each step's side effect happened. */
  async function outcome(name: string) {
    const id = started.get(name) as string;
    const ended = async () => (await database.db.query(ENDED, [id])).rows[0];
    const row = await waitFor(`episode ${name} to end`, ended, 30_000, 100);
    const names = (await journal(database.db, id)).map((j) => j.name);
    return {
      status: row.status,
      errorClass: row.error_class,
      attempts: row.attempts,
      taken: names.includes('resumed') || names.includes('orphaned'),
      effects: await sideEffects(database.db, id),
    };
  }

  it('a sleep longer than staleAfterMs, policy fail: done, not failed/orphaned; each step once', async () => {
    expect(await outcome('sleep-fail')).toEqual({ ...done, effects: once });
  });

  it('a sleep longer than staleAfterMs, policy restart: done, the step after it once', async () => {
    expect(await outcome('sleep-restart')).toEqual({ ...done, effects: once });
  });

  it('a retry backoff longer than staleAfterMs, policy restart: done, the retried step once', async () => {
    expect(await outcome('backoff-restart')).toEqual({
      ...done,
      effects: { ...once, 'move:failed': 1 },
    });
  });
});
