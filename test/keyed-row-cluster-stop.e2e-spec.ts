import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import { FAST_RECOVERY, post, startNode } from './support/demo-cluster.js';
import { startAll, type DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/** Episodes per case, started by events across the two nodes. */
const EPISODES = 8;
/**
 * The second of the rebalancer's five steps (`drain`) takes this long, every attempt: long enough
 * that all the episodes are inside it when the cluster is killed, short enough for a quick rerun.
 */
// Long enough that all eight reach it before the first leaves it, on a loaded two-core machine too
// (CI saw 4 s run out while eight episodes started across two nodes).
const SLOW_MS = 10_000;
const STEP_MS = 50;
const STEPS = ['plan', 'drain', 'move', 'verify', 'report'];
const TERMINAL = ['done', 'partially_failed', 'failed', 'canceled'];

/**
 * Event-started episodes whose dedupe key the claim table has never seen hold their first claim in
 * their own cyclium_episodes row (claim_owner, claim_fence, ...), with no cyclium_work_claims row.
 * Two demo nodes (claims on PostgreSQL, 4 s leases) run such episodes, all of them mid-step, when
 * every node process is killed with SIGKILL at once; then the cluster comes back, under the same
 * identities at once or under new ones. Recovery must find the claims held in rows (by their
 * journals' staleness), take each over through the claim table above the row's fence, and rerun
 * it: every episode ends `done` once, each step's side effect once, the unfinished steps written
 * only by the generation after the stop, and the claim (table row, mirrored in the episode row)
 * finished at fence 2 or more.
 */
describe('a whole-cluster stop while event episodes hold their claims in their rows', () => {
  const database = useDatabase(4);
  // A 4 s lease (renewed every 1.3 s): a loaded machine's stall does not cost a restarted run its
  // claim, and the stopped cluster's leases have lapsed about when the next nodes are up.
  const env = { ...FAST_RECOVERY, DEMO_LEASE_SECONDS: '4', DEMO_ACTORS: 'resource_rebalancer' };
  const all: DemoNode[] = [];
  let live: DemoNode[] = [];

  async function boot(ids: string[]): Promise<void> {
    live = await startAll(ids.map((id) => startNode(database.url, id, env)));
    all.push(...live);
  }

  async function killAll(): Promise<void> {
    await Promise.all(live.splice(0).map((node) => node.stop('SIGKILL')));
  }

  afterEach(killAll);
  afterAll(async () => {
    await Promise.all(all.map((node) => node.stop('SIGKILL')));
  });

  interface Run {
    id: string;
    event_id: string;
    trigger_type: string;
    dedupe_key: string | null;
    status: string;
    attempts: number;
    planned: boolean;
    row_owner: string | null;
    row_fence: number | null;
    row_state: string | null;
    table_owner: string | null;
    table_fence: number | null;
    table_state: string | null;
  }

  /** The rebalancer's episodes for events starting with `prefix`, each with its claim in both shapes. */
  async function runs(prefix: string): Promise<Run[]> {
    const { rows } = await database.db.query<Run>(
      `SELECT e.id, e.trigger_ref->>'eventId' AS event_id, e.trigger_type, e.dedupe_key, e.status,
              e.attempts,
              EXISTS (SELECT 1 FROM cyclium_episode_steps s
                       WHERE s.episode_id = e.id AND s.kind = 'step' AND s.name = 'plan') AS planned,
              e.claim_owner AS row_owner, e.claim_fence::int AS row_fence, e.claim_state AS row_state,
              c.owner_node AS table_owner, c.fence::int AS table_fence, c.state AS table_state
         FROM cyclium_episodes e
         LEFT JOIN cyclium_work_claims c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
        WHERE e.actor_id = 'resource_rebalancer' AND starts_with(e.trigger_ref->>'eventId', $1)
        ORDER BY 2`,
      [prefix],
    );
    return rows;
  }

  /** How often each step's side effect happened per episode, and how many after `since` (database clock). */
  async function effects(
    ids: string[],
    since: string,
  ): Promise<
    Array<{ episode_id: string; step: string; n: number; late: number; nodes: string[] }>
  > {
    const { rows } = await database.db.query(
      `SELECT episode_id, step, count(*)::int AS n, count(*) FILTER (WHERE at > $2)::int AS late,
              array_agg(DISTINCT node ORDER BY node) AS nodes
         FROM demo_rebalance_log WHERE episode_id = ANY($1::uuid[])
        GROUP BY 1, 2 ORDER BY 1, 2`,
      [ids, since],
    );
    return rows;
  }

  /** Journal entries per episode: steps by name, and `resumed` markers. */
  async function journals(
    ids: string[],
  ): Promise<Map<string, { steps: string[]; resumed: number }>> {
    const { rows } = await database.db.query<{ id: string; steps: string[]; resumed: number }>(
      `SELECT episode_id AS id,
              coalesce(array_agg(name ORDER BY step_no) FILTER (WHERE kind = 'step'), '{}') AS steps,
              count(*) FILTER (WHERE name = 'resumed')::int AS resumed
         FROM cyclium_episode_steps WHERE episode_id = ANY($1::uuid[]) GROUP BY 1`,
      [ids],
    );
    return new Map(rows.map((r) => [r.id, { steps: r.steps, resumed: r.resumed }]));
  }

  /**
   * Publishes `EPISODES` events round-robin on the live nodes and waits until every episode runs
   * its slow step with its first claim in its row alone; then kills every node at once. Returns the
   * episode ids and the database time of the stop.
   */
  async function stopMidRun(
    prefix: string,
    holders: string[],
  ): Promise<{ ids: string[]; stoppedAt: string }> {
    const eventIds = Array.from({ length: EPISODES }, (_, i) => `${prefix}-${i}`);
    await Promise.all(
      eventIds.map((eventId, i) =>
        post(live[i % live.length] as DemoNode, '/events', {
          type: 'resource.rebalance',
          eventId,
          payload: { resource: eventId, stepMs: STEP_MS, slowAtStep: 2, slowStepMs: SLOW_MS },
        }),
      ),
    );
    const holding = (await waitFor(
      `all ${EPISODES} episodes in their slow step, each claimed in its row`,
      async () => {
        const seen = await runs(prefix);
        const ready =
          seen.length === EPISODES &&
          seen.every((r) => r.status === 'running' && r.planned && r.row_state === 'claimed');
        return ready ? seen : undefined;
      },
      SLOW_MS,
      50,
    )) as Run[];
    await killAll();
    const { rows } = await database.db.query<{ at: string }>(`SELECT now()::text AS at`);
    const stoppedAt = rows[0]?.at as string;

    // The row-first path is the one under test: event keys, claimed in the row at fence 1 by one
    // of the nodes, and the claim table without a row for any of them.
    expect(holding.map((r) => r.event_id)).toEqual(eventIds.slice().sort());
    for (const r of holding) {
      expect(r.trigger_type).toBe('event');
      expect(r.dedupe_key).toMatch(/^event:resource_rebalancer:rebalance:/);
      expect(holders).toContain(r.row_owner);
      expect({ fence: r.row_fence, state: r.row_state }).toEqual({ fence: 1, state: 'claimed' });
      expect({ owner: r.table_owner, fence: r.table_fence }).toEqual({ owner: null, fence: null });
    }
    const keys = holding.map((r) => r.dedupe_key);
    const inTable = await database.db.query(
      `SELECT dedupe_key FROM cyclium_work_claims WHERE dedupe_key = ANY($1::text[])`,
      [keys],
    );
    expect(inTable.rows).toEqual([]);
    const ids = holding.map((r) => r.id);
    // Killed inside the slow step: nothing past `plan` had happened yet.
    expect((await effects(ids, stoppedAt)).map((e) => e.step)).toEqual(ids.map(() => 'plan'));
    return { ids, stoppedAt };
  }

  /**
   * Waits for every episode to end, then checks that each ran to the end once, restarted by
   * recovery's takeover of its row-held claim, by `finishers` (node identities) alone for the steps
   * after the stop.
   */
  async function finishedOnce(
    prefix: string,
    ids: string[],
    stoppedAt: string,
    finishers: string[],
  ): Promise<void> {
    const ended = (await waitFor(
      `all ${EPISODES} episodes to end after the stop`,
      async () => {
        const seen = await runs(prefix);
        const left = seen.filter((r) => !TERMINAL.includes(r.status));
        if (left.length === 0) return seen;
        // What the timeout reports: where each unfinished episode's claim is.
        const where = (r: Run) =>
          `${r.event_id} ${r.status}, row ${r.row_owner}@${r.row_fence} ${r.row_state}, ` +
          `table ${r.table_owner === null ? 'none' : `${r.table_owner}@${r.table_fence}`}`;
        throw new Error(`${left.length} not ended: ${left.map(where).join('; ')}`);
      },
      // The resumed episodes run the slow step again, after the recovery notices the stop.
      30_000 + SLOW_MS,
      200,
    )) as Run[];
    // Not stranded, not failed as orphans: each done.
    expect(ended.map((r) => [r.event_id, r.status])).toEqual(
      ended.map((r) => [r.event_id, 'done']),
    );
    for (const r of ended) {
      // Taken over through the claim table above the row's fence 1, finished there, and the
      // episode row mirrors the same generation.
      expect(r.table_fence).toBeGreaterThanOrEqual(2);
      expect({ owner: r.row_owner, fence: r.row_fence, state: r.row_state }).toEqual({
        owner: r.table_owner,
        fence: r.table_fence,
        state: 'done',
      });
      expect(r.table_state).toBe('done');
      expect(finishers).toContain(r.table_owner);
      // Restarted by recovery (once, unless a stall cost a restart its claim).
      expect(r.attempts).toBeGreaterThanOrEqual(1);
    }

    // Each step journaled once and its side effect done once; `plan` by the first generation
    // (replayed from the journal, not run again), every later step after the stop, by the nodes
    // that came back.
    const journal = await journals(ids);
    const done = await effects(ids, stoppedAt);
    for (const id of ids) {
      const attempts = ended.find((r) => r.id === id)?.attempts;
      expect(journal.get(id)).toEqual({ steps: STEPS, resumed: attempts });
      const mine = done.filter((e) => e.episode_id === id);
      expect(mine.map((e) => [e.step, e.n])).toEqual(
        STEPS.map((s) => [s, 1]).sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
      );
      for (const e of mine) {
        expect(e.late).toBe(e.step === 'plan' ? 0 : 1);
        if (e.step !== 'plan') expect(finishers).toEqual(expect.arrayContaining(e.nodes));
      }
    }
  }

  it('finishes each once when the same identities come back at once', async () => {
    const ids = ['keyed-row-a', 'keyed-row-b'];
    await boot(ids);
    const { ids: episodes, stoppedAt } = await stopMidRun('same', ids);
    await boot(ids);
    await finishedOnce('same', episodes, stoppedAt, ids);
  }, 120_000);

  it('finishes each once when nodes with new identities replace the whole cluster', async () => {
    const first = ['keyed-row-c', 'keyed-row-d'];
    await boot(first);
    const { ids: episodes, stoppedAt } = await stopMidRun('fresh', first);
    const fresh = ['keyed-row-e', 'keyed-row-f'];
    await boot(fresh);
    await finishedOnce('fresh', episodes, stoppedAt, fresh);
  }, 120_000);
});
