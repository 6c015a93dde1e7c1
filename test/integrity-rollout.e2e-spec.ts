import { afterAll, describe, expect, it } from '@jest/globals';
import type { DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import {
  FAST_RECOVERY,
  post,
  rebalanceOn,
  sideEffects,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const KEY = 'integrity-rollout-secret-0123456789abcdef';
/** Nodes without the option: three slots (a fourth run queues), a retry's backoff that outlasts the switch. */
const PLAIN = {
  ...FAST_RECOVERY,
  DEMO_TRIGGER_POLL_MS: '300',
  DEMO_RETRY_INITIAL_MS: '12000',
  DEMO_REBALANCER_SLOTS: '3',
};
const SIGNING = {
  ...PLAIN,
  DEMO_RETRY_INITIAL_MS: '3000',
  DEMO_REBALANCER_SLOTS: '10',
  DEMO_INTEGRITY_KEY: KEY,
};
const STEPS = ['drain', 'move', 'plan', 'report', 'verify'];
const DONE = { status: 'done', error_class: null };
const TAMPERED = { status: 'failed', error_class: 'tampered' };
const WAITING = `SELECT count(*) FILTER (WHERE status = 'queued')::int AS queued,
                        count(*) FILTER (WHERE status = 'waiting')::int AS waiting,
                        count(*) FILTER (WHERE status = 'deferred')::int AS deferred,
                        (SELECT count(*)::int FROM cyclium_episode_checkpoints c
                          WHERE c.episode_id = ANY($1::uuid[])) AS checkpoints
                   FROM cyclium_episodes WHERE id = ANY($1::uuid[])`;

type Answer = { status: string; episodeId: string | null };
type Counts = { queued: number; waiting: number; deferred: number; checkpoints: number };

/**
 * The `integrity` option with real demo nodes (claims on). Turned on in a live system by a rolling
 * switch: work that nodes without the option left in flight (running with checkpoints, queued,
 * waiting out a retry's backoff or a sleep, deferred for later) completes on nodes with it, none of
 * it `tampered`, and once the last node without it is gone the cut-over is recorded: an unsigned row
 * inserted after it is refused. Then episode rows themselves are signed: forged or edited rows of
 * each kind fail as `tampered` without running a step, while a run that crashes or retries with the
 * option on completes.
 */
describe('integrity: turned on in a live cluster, and episode rows signed', () => {
  const database = useDatabase(4);
  const nodes = new Map<string, DemoNode>();
  const start = async (id: string, env: Record<string, string>) => {
    const node = await startNode(database.url, id, env);
    nodes.set(id, node);
    return node;
  };
  const stop = async (id: string, signal: NodeJS.Signals) => {
    await nodes.get(id)?.stop(signal);
    nodes.delete(id);
  };
  const trigger = async (on: DemoNode, body: Record<string, unknown>) =>
    (await post<Answer>(on, '/actors/resource_rebalancer/rebalance', body)).episodeId as string;
  const rows = async <T = Record<string, unknown>>(sql: string, params: unknown[] = []) => {
    const { rows: found } = await database.db.query(sql, params);
    return found as T[];
  };
  const ENDING = `SELECT status, error_class FROM cyclium_episodes WHERE id = $1 AND finished_at IS NOT NULL`;
  const ending = async (id: string) => (await rows(ENDING, [id]))[0];
  const ended = (id: string) => waitFor(`episode ${id} to end`, () => ending(id), 45_000, 100);
  const steps = async (id: string) => Object.keys(await sideEffects(database.db, id)).sort();
  /** A row inserted by hand, as a writer without the key would: a stale running rebalance, but for `columns`. */
  const forge = async (columns: Record<string, unknown>) => {
    const row = {
      actor_id: 'resource_rebalancer',
      expectation_id: 'rebalance',
      trigger_type: 'event',
      trigger_ref: JSON.stringify({ type: 'event', payload: { resource: 'forged', stepMs: 10 } }),
      status: 'running',
      owner_node: 'gone-node',
      started_at: new Date(Date.now() - 3_600_000),
      ...columns,
    };
    const names = Object.keys(row);
    const values = names.map((_, i) => `$${i + 1}`).join(', ');
    const sql = `INSERT INTO cyclium_episodes (${names.join(', ')}) VALUES (${values}) RETURNING id`;
    return (await rows<{ id: string }>(sql, Object.values(row)))[0]?.id as string;
  };

  afterAll(async () => {
    await Promise.all([...nodes.values()].map((n) => n.stop('SIGKILL')));
  });

  it('a rolling switch: work in flight completes, nothing tampered; then unsigned rows are refused', async () => {
    const [p1, p2] = await Promise.all([start('plain-1', PLAIN), start('plain-2', PLAIN)]);
    // In flight on nodes without the option: running with checkpoints (p1's three slots full), one
    // queued behind them, one waiting out a retry's backoff, one sleeping, one deferred for later.
    const slow = (resource: string) => ({ resource, stepMs: 2_500 });
    const running = [
      await rebalanceOn(p1, slow('roll-run-1')),
      await rebalanceOn(p1, slow('roll-run-2')),
      await rebalanceOn(p1, slow('roll-run-3')),
      await rebalanceOn(p2, slow('roll-run-4')),
    ];
    const queued = await trigger(p1, { payload: { resource: 'roll-queued', stepMs: 50 } });
    const failOnce = { resource: 'roll-retry', stepMs: 20, failAtStep: 2, failTimes: 1 };
    const retried = await rebalanceOn(p2, failOnce, 'rebalance_retried');
    const sleepLong = { resource: 'roll-sleep', stepMs: 20, sleepMs: 15_000 };
    const sleeping = await rebalanceOn(p2, sleepLong, 'rebalance_retried');
    const deferred = await trigger(p2, {
      payload: { resource: 'roll-later', stepMs: 20 },
      delayMs: 25_000,
    });
    const all = [...running, queued, retried, sleeping, deferred];
    await waitFor('the work in flight', async () => {
      const counts = (await rows<Counts>(WAITING, [all]))[0];
      return (
        counts?.queued === 1 &&
        counts.waiting === 2 &&
        counts.deferred === 1 &&
        counts.checkpoints >= 3
      );
    });

    // The switch, one node at a time: a node with the option joins, a node without it drains, and so on.
    const signing = await start('signing-1', SIGNING);
    await stop('plain-1', 'SIGTERM');
    await start('signing-2', SIGNING);
    await stop('plain-2', 'SIGTERM');

    for (const id of all) expect({ id, ...(await ended(id)) }).toEqual({ id, ...DONE });
    for (const id of all) expect((await steps(id)).filter((s) => STEPS.includes(s))).toEqual(STEPS);
    expect(await rows(`SELECT id FROM cyclium_episodes WHERE error_class = 'tampered'`)).toEqual(
      [],
    );
    const open =
      'rows without a signature are accepted while nodes without the option are live (plain-1, plain-2)';
    expect(signing.output()).toContain(open);
    const cutover = (await rows(`SELECT * FROM cyclium_integrity_cutovers`))[0];
    const recordedBy = expect.stringMatching(/^signing-[12]$/);
    expect(cutover).toMatchObject({
      source_stack: null,
      source_env: null,
      recorded_by: recordedBy,
    });
    // The run for later at least was still waiting then: the cut-over signed it, with its request.
    expect(cutover?.signed_rows).toBeGreaterThanOrEqual(2);

    // After the cut-over a row without a signature is refused: recovery takes it, its run fails it.
    const late = await forge({});
    expect(await ended(late)).toEqual(TAMPERED);
    expect(await steps(late)).toEqual([]);
  }, 150_000);

  it('forged and edited episode rows fail as tampered without running; real crashes and retries complete', async () => {
    const i1 = nodes.get('signing-1') as DemoNode;
    const i2 = nodes.get('signing-2') as DemoNode;
    // Rows nobody with the key wrote: a stale run, a run a drain stamped, a queued row of a node that is gone.
    const stale = await forge({});
    const interrupted = await forge({ phase: 'interrupted', started_at: new Date() });
    const orphanQueued = await forge({ status: 'queued', started_at: null, queued_at: new Date() });
    // Rows written with the key, then edited where no trigger request's signature looks: a run for
    // later given more attempts, a retry's wait given attempts back.
    const later = await trigger(i1, {
      payload: { resource: 'edited-later', stepMs: 10 },
      delayMs: 2_000,
    });
    await database.db.query(`UPDATE cyclium_episodes SET max_attempts = 99 WHERE id = $1`, [later]);
    const failThird = { resource: 'edited-retry', stepMs: 10, failAtStep: 3, failTimes: 1 };
    const backoff = await rebalanceOn(i1, failThird, 'rebalance_retried');
    await waitForStatus(database.db, backoff, 'waiting');
    await database.db.query(`UPDATE cyclium_episodes SET attempts = attempts + 5 WHERE id = $1`, [
      backoff,
    ]);
    // And with the option on, real work: a run whose node is killed, a run that fails once and retries.
    const crashed = await rebalanceOn(i1, { resource: 'signed-crash', stepMs: 800 });
    const failSecond = { resource: 'signed-retry', stepMs: 10, failAtStep: 2, failTimes: 1 };
    const retried = await rebalanceOn(i2, failSecond, 'rebalance_retried');
    await waitFor(
      'the crash victim past its first step',
      async () => (await steps(crashed)).length >= 1,
    );
    await stop('signing-1', 'SIGKILL');

    for (const id of [stale, interrupted, orphanQueued, later, backoff]) {
      expect({ id, ...(await ended(id)) }).toEqual({ id, ...TAMPERED });
    }
    for (const id of [stale, interrupted, orphanQueued, later]) expect(await steps(id)).toEqual([]);
    // The edited retry ran its first two steps before it was edited, and nothing after.
    expect(await steps(backoff)).toEqual(['drain', 'move:failed', 'plan']);
    const DETAIL = `SELECT error_detail FROM cyclium_episodes WHERE id = $1`;
    const [detail] = await rows<{ error_detail: string }>(DETAIL, [stale]);
    expect(detail?.error_detail).toContain(
      `cyclium_episodes row ${stale} is not signed by this deployment's`,
    );

    expect(await ended(crashed)).toEqual(DONE);
    expect(await ended(retried)).toEqual(DONE);
    const [taken] = await rows(
      `SELECT attempts, owner_node, signature FROM cyclium_episodes WHERE id = $1`,
      [crashed],
    );
    expect(taken).toEqual({
      attempts: 1,
      owner_node: 'signing-2',
      signature: expect.stringMatching(/^demo:/),
    });

    // A real signature copied onto a forged row does not pass for it: it binds its own episode.
    const copied = await forge({ signature: taken?.signature });
    expect(await ended(copied)).toEqual(TAMPERED);
    expect(await steps(copied)).toEqual([]);
    expect(i2.process.exitCode).toBeNull();
  }, 120_000);
});
