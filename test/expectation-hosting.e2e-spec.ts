import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  post,
  rebalanceOn,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const EPISODES = `SELECT id, status, error_class, owner_node FROM cyclium_episodes WHERE id = ANY($1::uuid[])`;
/** The database clock is past every moment a node may act on the three: wake-up due, run stale, its node gone. */
const ALL_ACTIONABLE = `
  SELECT now() > (SELECT max(not_before) FROM cyclium_trigger_requests WHERE episode_id = $1) + interval '2 seconds'
     AND now() > (SELECT coalesce((SELECT max(created_at) FROM cyclium_episode_steps s WHERE s.episode_id = e.id),
                                  e.started_at)
                    FROM cyclium_episodes e WHERE e.id = $2) + interval '4.5 seconds'
     AND now() > (SELECT last_seen_at FROM cyclium_nodes WHERE node_identity = 'host-old')
                 + interval '4.5 seconds' AS past`;
/** `status/error_class` of each, or `status on owner_node`. */
type Row = Record<string, string | null>;
const outcome = (r: Row) => `${r.status}/${r.error_class ?? ''}`;
const placed = (r: Row) => `${r.status} on ${r.owner_node}`;
/** recovery.notHostedGraceMs of the node that watches in the second case: longer than a run going stale. */
const GRACE_MS = 12_000;
/** The gone node's run is stale and the node gone (as ALL_ACTIONABLE), its grace not yet over. */
const STALE_WITHIN_GRACE = `
  SELECT now() > (SELECT coalesce((SELECT max(created_at) FROM cyclium_episode_steps s WHERE s.episode_id = e.id),
                                  e.started_at)
                    FROM cyclium_episodes e WHERE e.id = $1) + interval '4.5 seconds'
     AND now() > (SELECT last_seen_at FROM cyclium_nodes WHERE node_identity = 'host-gone') + interval '4.5 seconds'
     AS stale,
         now() < (SELECT last_seen_at FROM cyclium_nodes WHERE node_identity = 'host-gone')
                 + make_interval(secs => $2::double precision / 1000) AS within`;
/** Each failed row's detail and whether it failed a full grace after the last beat of the node that had it. */
const FAILED_AFTER_GRACE = `
  SELECT e.error_detail AS detail,
         e.finished_at >= n.last_seen_at + make_interval(secs => $2::double precision / 1000) AS after_grace
    FROM cyclium_episodes e, cyclium_nodes n
   WHERE e.id = ANY($1::uuid[]) AND n.node_identity = 'host-gone'`;

/**
 * A rolling deploy where releases differ in an actor's expectations, with real node processes:
 * a node of the release without `rebalance_retried` hosts resource_rebalancer all the same, and
 * must leave that expectation's wake-up, restart and queued row to a node that has it (before,
 * it took each and failed it `unknown_actor`). The release with it, booting, runs them all.
 */
describe('expectations a node does not host', () => {
  const database = useDatabase(4);
  const env = { ...FAST_RECOVERY, DEMO_TRIGGER_POLL_MS: '500' };
  const nodes: DemoNode[] = [];
  const boot = async (id: string, extra: Record<string, string> = {}) => {
    const node = await startNode(database.url, id, { ...env, ...extra });
    nodes.push(node);
    return node;
  };

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  let hostNew: DemoNode | undefined;
  const rowsOf = async (ids: Record<string, string>, shown: (row: Row) => string) => {
    const byId = new Map(
      (await database.db.query<Row>(EPISODES, [Object.values(ids)])).rows.map((r) => [r.id, r]),
    );
    return Object.fromEntries(
      Object.entries(ids).map(([what, id]) => [what, shown(byId.get(id) ?? {})]),
    );
  };

  it('leaves their wake-ups, restarts and queued rows to a node that hosts them', async () => {
    // The old release: every expectation, one slot, so a third episode queues.
    const [old] = await Promise.all([
      boot('host-old', { DEMO_REBALANCER_SLOTS: '1' }),
      boot('host-lacking', { DEMO_DROP_EXPECTATIONS: 'resource_rebalancer.rebalance_retried' }),
    ]);
    const sleeping = await rebalanceOn(
      old,
      { resource: 'sleeping', stepMs: 20, sleepMs: 3_000 },
      'rebalance_retried',
    );
    await waitForStatus(database.db, sleeping, 'waiting');
    const running = await rebalanceOn(
      old,
      { resource: 'running', stepMs: 1_500 },
      'rebalance_retried',
    );
    const response = await fetch(
      `http://127.0.0.1:${old.port}/actors/resource_rebalancer/rebalance_retried`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ payload: { resource: 'queued', stepMs: 20 } }),
      },
    );
    const { status, episodeId: queued } = (await response.json()) as {
      status: string;
      episodeId: string;
    };
    expect(status).toBe('queued');
    await old.stop('SIGKILL');

    const ids = { sleeping, running, queued };
    const past = async () =>
      (await database.db.query(ALL_ACTIONABLE, [sleeping, running])).rows[0].past;
    await waitFor(
      'the wake-up due, the run stale and its node gone, a few sweeps and polls ago',
      past,
      20_000,
      200,
    );
    const rows = (shown: (row: Row) => string) => rowsOf(ids, shown);
    expect(await rows(outcome)).toEqual({
      sleeping: 'waiting/',
      running: 'running/',
      queued: 'queued/',
    });

    // The release with the expectation comes up: it runs all three.
    hostNew = await boot('host-new');
    const ended = async () =>
      Object.values(await rows(outcome)).every((r) => /^(done|failed)\//.test(r));
    await waitFor('the three episodes to end', ended, 30_000, 200);
    expect(await rows(placed)).toEqual({
      sleeping: 'done on host-new',
      running: 'done on host-new',
      queued: 'done on host-new',
    });
  }, 120_000);

  /**
   * The expectation removed for good: the nodes left host its actor, none the expectation. Its
   * running and queued rows wait while the node that had it may come back (the grace), then fail
   * `not_hosted` naming the expectation (before, not_hosted went by actor: they waited forever).
   */
  it('fails their running and queued work not_hosted once no node declared the expectation for the grace', async () => {
    // Only host-lacking (from the case above, default grace) stays; host-watch lacks it too and counts the silence.
    await hostNew?.stop('SIGKILL');
    const [gone] = await Promise.all([
      boot('host-gone', { DEMO_REBALANCER_SLOTS: '1' }),
      boot('host-watch', {
        DEMO_DROP_EXPECTATIONS: 'resource_rebalancer.rebalance_retried',
        DEMO_NOT_HOSTED_GRACE_MS: String(GRACE_MS),
      }),
    ]);
    // Each node's row lists the expectations it hosts, tagged with its process's boot id.
    const listed = `SELECT node_identity AS node,
                           (expectations -> 'hosted' -> 'resource_rebalancer') ? 'rebalance_retried' AS has,
                           expectations ->> 'boot' = boot_id::text AS own
                      FROM cyclium_nodes WHERE node_identity IN ('host-gone', 'host-watch') ORDER BY node_identity`;
    expect((await database.db.query(listed)).rows).toEqual([
      { node: 'host-gone', has: true, own: true },
      { node: 'host-watch', has: false, own: true },
    ]);
    const running = await rebalanceOn(
      gone,
      { resource: 'gone-running', stepMs: 1_500 },
      'rebalance_retried',
    );
    const path = '/actors/resource_rebalancer/rebalance_retried';
    type Answer = { status: string; episodeId: string };
    const payload = { resource: 'gone-queued', stepMs: 20 };
    const { status, episodeId: queued } = await post<Answer>(gone, path, { payload });
    expect(status).toBe('queued');
    await gone.stop('SIGKILL');

    const ids = { running, queued };
    const check = async () =>
      (await database.db.query(STALE_WITHIN_GRACE, [running, GRACE_MS])).rows[0];
    await waitFor(
      'the run stale and its node gone, a few sweeps ago',
      async () => (await check()).stale,
      20_000,
      200,
    );
    const stillWithin = (await check()).within;
    const whileExpected = await rowsOf(ids, outcome);
    if (stillWithin) expect(whileExpected).toEqual({ running: 'running/', queued: 'queued/' });

    const ended = async () =>
      Object.values(await rowsOf(ids, outcome)).every((r) => /^(done|failed)\//.test(r));
    await waitFor('both episodes to end', ended, GRACE_MS + 30_000, 200);
    expect(await rowsOf(ids, outcome)).toEqual({
      running: 'failed/not_hosted',
      queued: 'failed/not_hosted',
    });
    const failed = (await database.db.query(FAILED_AFTER_GRACE, [Object.values(ids), GRACE_MS]))
      .rows;
    expect(failed).toEqual([
      { detail: expect.stringContaining('expectation rebalance_retried'), after_grace: true },
      { detail: expect.stringContaining('expectation rebalance_retried'), after_grace: true },
    ]);
  }, 120_000);
});
