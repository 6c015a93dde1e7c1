import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, rebalanceOn, startNode, waitForStatus } from './support/demo-cluster.js';
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

  it('leaves their wake-ups, restarts and queued rows to a node that hosts them', async () => {
    // The old release: every expectation, one slot, so a third episode queues.
    const [old] = await Promise.all([
      boot('host-old', { DEMO_REBALANCER_SLOTS: '1' }),
      boot('host-lacking', { DEMO_DROP_EXPECTATIONS: 'resource_rebalancer.rebalance_retried' }),
    ]);
    const sleeping = await rebalanceOn(old, { resource: 'sleeping', stepMs: 20, sleepMs: 3_000 }, 'rebalance_retried');
    await waitForStatus(database.db, sleeping, 'waiting');
    const running = await rebalanceOn(old, { resource: 'running', stepMs: 1_500 }, 'rebalance_retried');
    const response = await fetch(`http://127.0.0.1:${old.port}/actors/resource_rebalancer/rebalance_retried`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ payload: { resource: 'queued', stepMs: 20 } }),
    });
    const { status, episodeId: queued } = (await response.json()) as { status: string; episodeId: string };
    expect(status).toBe('queued');
    await old.stop('SIGKILL');

    const ids = { sleeping, running, queued };
    const past = async () => (await database.db.query(ALL_ACTIONABLE, [sleeping, running])).rows[0].past;
    await waitFor('the wake-up due, the run stale and its node gone, a few sweeps and polls ago', past, 20_000, 200);
    const rows = async (shown: (row: Row) => string) => {
      const byId = new Map((await database.db.query<Row>(EPISODES, [Object.values(ids)])).rows.map((r) => [r.id, r]));
      return Object.fromEntries(Object.entries(ids).map(([what, id]) => [what, shown(byId.get(id) ?? {})]));
    };
    expect(await rows(outcome)).toEqual({
      sleeping: 'waiting/',
      running: 'running/',
      queued: 'queued/',
    });

    // The release with the expectation comes up: it runs all three.
    await boot('host-new');
    const ended = async () => Object.values(await rows(outcome)).every((r) => /^(done|failed)\//.test(r));
    await waitFor('the three episodes to end', ended, 30_000, 200);
    expect(await rows(placed)).toEqual({
      sleeping: 'done on host-new',
      running: 'done on host-new',
      queued: 'done on host-new',
    });
  });
});
