/**
 * A node's hot statements cost what the live work costs, however long the history behind it: with
 * a million finished episodes (their journal, claims, requests and outputs) behind a thousand live
 * ones, every statement a node sends while it begins, steps and ends an episode, renews and
 * finishes claims, sweeps, polls, takes from a queue, lists and reads the cluster status reads through an index, and no plan
 * node reads more rows than a bound set by the live work.
 *
 * The statements are the real ones: an in-process node runs on the big database and each
 * statement it sends is explained (EXPLAIN ANALYZE, then rolled back: inside a savepoint when its
 * transaction is open) on its own connection just before it is sent, in the state it meets there.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  CycliumStatus,
  Episodes,
  Expectation,
  Recovery,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { EpisodeQueue } from '../libs/cyclium/src/episodes/episode-queue.js';
import { TriggerPoller } from '../libs/cyclium/src/dispatch/trigger-poller.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase } from './support/database.js';
import { nodesOf, type PlanNode as PlanNodeBase } from './support/plan-nodes.js';
import { waitFor } from './support/wait-for.js';
import { RetentionSchedule } from '../libs/cyclium/src/retention/retention.service.js';

const HISTORY = 1_000_000;
const LIVE = 1_000;
/** The most rows any plan node may read: a few times the live work, a fraction of a percent of the history. */
const MOST_READ = 5_000;
const TABLES =
  /cyclium_(episodes|episode_steps|episode_checkpoints|work_claims|trigger_requests|outputs)\b/;

@Injectable()
@Actor({ id: 'planner', maxConcurrentEpisodes: 1 })
class PlannerActor {
  @Expectation({ id: 'run', trigger: 'manual' })
  async run(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('first', () => ep.trigger.payload.tag);
    await ep.step('second', () => 2);
  }
}

/** A node of an EXPLAIN ANALYZE plan. */
interface PlanNode extends PlanNodeBase {
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

interface Explained {
  text: string;
  plan?: PlanNode;
  error?: string;
}

type Query = (this: pg.Client, ...args: unknown[]) => unknown;

/** What a node read over all its loops: the rows it returned and those its filters threw away. */
function readBy(node: PlanNode): number {
  return (
    (node['Actual Rows'] +
      (node['Rows Removed by Filter'] ?? 0) +
      (node['Rows Removed by Index Recheck'] ?? 0)) *
    node['Actual Loops']
  );
}

function describePlan(entry: Explained): string {
  const nodes = entry.plan ? nodesOf(entry.plan) : [];
  const shown = nodes.map(
    (n) =>
      `${n['Node Type']}${n['Relation Name'] ? ` on ${n['Relation Name']}` : ''}${n['Index Name'] ? ` using ${n['Index Name']}` : ''} (${readBy(n)})`,
  );
  return `${label(entry.text)}\n  ${entry.error ?? shown.join(', ')}`;
}

/** The statement's first line that says what it is, for the failure message. */
function label(text: string): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, 160);
}

describe('hot statements with a million finished episodes behind a thousand live ones', () => {
  let url: string;
  let own: pg.Client;
  let driver: pg.Client;
  let app: INestApplicationContext | undefined;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- kept to be called with each client as `this`, and put back
  const original = pg.Client.prototype.query as unknown as Query;
  const explained = new Map<string, Explained>();
  let recording = false;

  async function explain(
    client: pg.Client,
    key: string,
    text: string,
    values: unknown,
  ): Promise<void> {
    const entry: Explained = { text };
    explained.set(key, entry);
    // pg records the transaction status of the last ReadyForQuery: 'T' inside an open transaction.
    const status = (client as unknown as { _txStatus: string | null })._txStatus;
    if (status === 'E') return;
    const inTransaction = status === 'T';
    const run = (sql: string, params?: unknown) =>
      original.call(client, sql, params) as Promise<pg.QueryResult>;
    await run(inTransaction ? 'SAVEPOINT cyclium_plan' : 'BEGIN');
    try {
      const { rows } = await run(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
      entry.plan = (rows[0] as { 'QUERY PLAN': Array<{ Plan: PlanNode }> })['QUERY PLAN'][0]?.Plan;
    } catch (error) {
      entry.error = (error as Error).message;
    } finally {
      await run(inTransaction ? 'ROLLBACK TO SAVEPOINT cyclium_plan' : 'ROLLBACK');
      if (inTransaction) await run('RELEASE SAVEPOINT cyclium_plan');
    }
  }

  /** Sends each statement on the tables the history fills, the first time it is sent with its values, through `explain` first. */
  function record(): void {
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const [first, second] = args;
      const config =
        typeof first === 'string'
          ? { text: first, values: Array.isArray(second) ? second : undefined }
          : (first as pg.QueryConfig);
      const text = config?.text;
      const key = `${text}\n${JSON.stringify(config?.values ?? [])}`;
      if (
        !recording ||
        this === own ||
        typeof text !== 'string' ||
        !TABLES.test(text) ||
        /^\s*EXPLAIN/i.test(text) ||
        explained.has(key)
      ) {
        return original.apply(this, args);
      }
      const before = explain(this, key, text, config.values);
      const callback = args.at(-1);
      if (typeof callback === 'function') {
        before.then(
          () => original.apply(this, args),
          (error: unknown) => (callback as (error: unknown) => void)(error),
        );
        return undefined;
      }
      return before.then(() => original.apply(this, args));
    } as unknown as typeof pg.Client.prototype.query;
  }

  beforeAll(async () => {
    url = await freshDatabase();
    own = new pg.Client({ connectionString: url });
    own.on('error', () => undefined);
    await own.connect();
    await own.query('SET synchronous_commit = off');
    // Statistics stay those of the empty tables until the second test analyses them (the state right after a deploy).
    for (const table of FILLED)
      await own.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    await own.query('ANALYZE');
    await fill(own);
    record();
    recording = true;
    driver = new pg.Client({ connectionString: url });
    driver.on('error', () => undefined);
    await driver.connect();
    app = await startCycliumApp({
      url,
      cyclium: {
        nodeIdentity: 'planner-node',
        workClaims: 'postgres',
        bus: 'local',
        recovery: { onBoot: false },
      },
      providers: [PlannerActor],
    });
  }, 120_000);

  afterAll(async () => {
    recording = false;
    pg.Client.prototype.query = original as unknown as typeof pg.Client.prototype.query;
    await app?.close();
    await driver?.end();
    await own?.end();
  });

  /** One of everything a node does, as pass `n` (its keys and rows are its own). */
  async function drive(n: number): Promise<void> {
    const nest = app as INestApplicationContext;
    const episodes = nest.get(Episodes);
    const status = async (id: string) =>
      (
        await own.query<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [
          id,
        ])
      ).rows[0]?.status;
    const finished = (id: string) =>
      waitFor(`episode ${id} to finish`, async () =>
        ['done', 'failed'].includes((await status(id)) ?? ''),
      );

    // Begin, steps and end; the second trigger waits in this node's queue (one slot) and is taken from it.
    const first = await episodes.trigger(
      'planner',
      'run',
      { tag: 'a' },
      { dedupeKey: `plans:${n}` },
    );
    const second = await episodes.trigger('planner', 'run', { tag: 'b' });
    for (const result of [first, second]) {
      if (!('episode' in result)) throw new Error(`trigger answered ${result.status}`);
      await finished(result.episode.id);
    }
    // A deferred episode of this node's actor, with its pending request: the poller takes it.
    const { rows: deferred } = await own.query<{ id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status)
       VALUES ('planner', 'run', 'manual', '{"type": "manual", "payload": {"tag": "c"}}', 'deferred') RETURNING id`,
    );
    const deferredId = (deferred[0] as { id: string }).id;
    await own.query(
      `INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node) VALUES ($1, 'planner', 'run', 'elsewhere')`,
      [deferredId],
    );
    await nest.get(TriggerPoller).pollNow();
    await finished(deferredId);

    await nest.get(Recovery).sweep();
    const queue = nest.get(EpisodeQueue);
    // Each live node queues one actor's episodes.
    await queue.dequeue((['billing', 'mailer', 'indexer'] as const)[n], ['run'], `live-node-${n}`);
    await queue.takeFromPeer('mailer', ['run'], 'planner-node', { stack: null, env: null });

    const page = await episodes.list();
    await episodes.list({ actorId: 'planner', status: 'done', limit: 20 });
    await episodes.list({ cursor: page.nextCursor as string });
    // A rare combination: a scan in time order would walk far into the history to fill the page.
    await episodes.list({ actorId: 'reporter', status: 'canceled', sourceEnv: 'staging' });
    // The operations page's cluster view: the live work, and what finished within its window (about 125 episodes here).
    await nest.get(CycliumStatus).cluster({ windowMs: 300_000 });
    // Retention: a batch archives and deletes the oldest due rows through their indexes, however many are due.
    // Only once analysed: with statistics of an empty table the delete batch takes a bitmap scan of every
    // archived row due (35,601 here) before its limit; retention's own writes get the table analysed.
    if (n === 2) await nest.get(RetentionSchedule).passNow();

    // The adapter's own statements, on a connection of their own: acquire (insert, and a takeover of a finished claim), renew, finish.
    const claims = new PostgresClaims(driver);
    await claims.acquire(`plans:new:${n}`, 'planner-node', { leaseSeconds: 60 });
    await claims.acquire(`hist:${2 * n}`, 'planner-node', { leaseSeconds: 60 });
    const { rows: held } = await own.query<{ dedupe_key: string; fence: string }>(
      `SELECT dedupe_key, fence FROM cyclium_work_claims WHERE owner_node = $1 AND state = 'claimed' LIMIT 50`,
      [`live-node-${n}`],
    );
    await claims.renewMany(
      `live-node-${n}`,
      held.map((c) => ({ key: c.dedupe_key, fence: Number(c.fence) })),
      60,
    );
    await claims.complete(`plans:new:${n}`, 'planner-node');
    await claims.reclaimExpired(10);
  }

  /** What went wrong in the plans recorded so far: a full scan of a large table, or a node reading past the bound. */
  function failures(): string[] {
    return [...explained.values()].flatMap((entry) => {
      if (entry.error || !entry.plan)
        return [`${label(entry.text)}: could not be explained: ${entry.error}`];
      return nodesOf(entry.plan).flatMap((node) => [
        ...(node['Node Type'] === 'Seq Scan' && TABLES.test(node['Relation Name'] ?? '')
          ? [`${label(entry.text)}: Seq Scan on ${node['Relation Name']}`]
          : []),
        ...(readBy(node) > MOST_READ
          ? [
              `${label(entry.text)}: ${node['Node Type']} ${node['Relation Name'] ?? ''} read ${readBy(node)} rows`,
            ]
          : []),
      ]);
    });
  }

  /** The statements a pass must have met, by a piece of their text. */
  const EXPECTED: Array<[string, RegExp]> = [
    ['begin (insert and claim)', /INSERT INTO cyclium_episodes[\s\S]*claim_seen/],
    ['step write', /INSERT INTO cyclium_episode_steps/],
    [
      'end',
      // A batch finishes its claims after the checkpoints; a lone end finishes its claim first, as
      // its proof (finishHeld).
      /DELETE FROM cyclium_episode_checkpoints[\s\S]*claim_finished|claim_finished[\s\S]*DELETE FROM cyclium_episode_checkpoints|WITH claim_table AS \(\s*UPDATE cyclium_work_claims[\s\S]*DELETE FROM cyclium_episode_checkpoints/,
    ],
    ['queue take', /WITH head AS/],
    ['take from peer', /owner_node IS DISTINCT FROM \$1/],
    ['dequeue', /status = 'queued' AND owner_node = \$1 AND actor_id = \$2/],
    ['sweep candidates', /quiet_since/],
    ['not hosted', /WITH stranded AS/],
    ['orphaned queued', /e\.owner_node IS DISTINCT FROM \$4/],
    [
      'poller pending',
      /FROM cyclium_trigger_requests\s+WHERE status IN \('pending', 'scheduled'\)/,
    ],
    ['poller take', /UPDATE cyclium_trigger_requests SET status = 'completed'/],
    ['list', /cursor_at FROM cyclium_episodes/],
    [
      'cluster status',
      /WITH running AS \(SELECT owner_node, count\(\*\)::int AS n FROM cyclium_episodes/,
    ],
    ['retention batch', /pg_try_advisory_xact_lock\(1668183404/],
    ['claim insert or read', /inserted AS \(\s*INSERT INTO cyclium_work_claims/],
    ['claim take over', /UPDATE cyclium_work_claims c SET state = 'claimed'/],
    ['claims renew many', /JOIN unnest\(\$3::text\[\], \$4::bigint\[\]\)/],
    ['claim finish', /UPDATE cyclium_work_claims c SET state = \$3/],
    ['claims reclaim expired', /WHERE state = 'claimed' AND lease_until < now\(\)/],
  ];

  for (const [n, when] of [
    [1, 'analysed while empty, then filled'],
    [2, 'analysed after filling'],
  ] as const) {
    it(`keeps every statement of a node on its indexes, reading what the live work needs (${when})`, async () => {
      if (n === 2) {
        recording = false;
        await own.query('ANALYZE');
        explained.clear();
        recording = true;
      }
      await drive(n);
      if (process.env.HISTORY_PLANS_DUMP)
        for (const entry of explained.values()) console.log(describePlan(entry));
      const texts = [...explained.values()].map((entry) => entry.text.replace(/\s+/g, ' '));
      const expected = EXPECTED.filter(([what]) => n === 2 || what !== 'retention batch');
      expect(
        expected
          .filter(([, pattern]) => !texts.some((text) => pattern.test(text)))
          .map(([what]) => what),
      ).toEqual([]);
      expect(failures()).toEqual([]);
    });
  }
});

/** The tables the history fills; their secondary indexes are built after the rows, as one sorted build each. */
const FILLED = [
  'cyclium_episodes',
  'cyclium_episode_steps',
  'cyclium_episode_checkpoints',
  'cyclium_work_claims',
  'cyclium_trigger_requests',
  'cyclium_outputs',
];

/**
 * The history and the live work, one INSERT … SELECT per table, each in primary key order. The
 * migrations' secondary indexes are dropped first and built again from their own definitions
 * afterwards: a million random insertions into each would take minutes.
 */
async function fill(client: pg.Client): Promise<void> {
  // The label says what each statement fills.
  const timed = async (_what: string, sql: string, params: unknown[] = []) =>
    client.query(sql, params);
  const { rows: indexes } = await client.query<{ name: string; definition: string }>(
    `SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
      WHERE t.relname = ANY($1::text[]) AND t.relnamespace = current_schema()::regnamespace
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`,
    [FILLED],
  );
  for (const { name } of indexes) await client.query(`DROP INDEX ${name}`);
  // Sorts in memory, for the inserts in key order and the index builds.
  await client.query(`SET work_mem = '256MB'`);
  await client.query(`SET maintenance_work_mem = '256MB'`);
  // Finished over the last four weeks, one every 2.4 s (ids in that order, so the primary key is
  // built by appending); a tenth archived a day after finishing.
  await timed(
    'history',
    `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, dedupe_key, status, owner_node, attempts, source_env,
                                   started_at, finished_at, inserted_at, updated_at, archived_at)
     SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, (ARRAY['planner', 'billing', 'mailer', 'indexer', 'reporter'])[1 + g % 5], 'run',
            (ARRAY['manual', 'event', 'schedule'])[1 + g % 3], CASE WHEN g % 2 = 0 THEN 'hist:' || g END,
            CASE WHEN g % 50 = 0 THEN 'failed' WHEN g % 97 = 0 THEN 'canceled' ELSE 'done' END,
            'old-node-' || g % 7, 1, CASE WHEN g % 4 = 0 THEN 'staging' END,
            t - interval '2 seconds', t, t - interval '3 seconds', t, CASE WHEN g % 10 = 0 AND g > 40000 THEN t + interval '1 day' END
       FROM generate_series(1, $1::int) g, LATERAL (SELECT now() - g * interval '2.4 seconds') AS x (t)`,
    [HISTORY],
  );
  // Live: running on four nodes, queued on them, deferred to any full node.
  await timed(
    'live',
    `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, dedupe_key, status, owner_node, source_env, started_at, queued_at, inserted_at)
     SELECT (ARRAY['billing', 'mailer', 'indexer', 'reporter'])[1 + g % 4], 'run', 'manual', CASE WHEN g % 2 = 0 THEN 'live:' || g END,
            (ARRAY['running', 'queued', 'deferred'])[1 + g % 3], CASE WHEN g % 3 <> 2 THEN 'live-node-' || g % 4 END,
            CASE WHEN g % 4 = 0 THEN 'staging' END,
            CASE WHEN g % 3 = 0 THEN now() - g * interval '1 second' END, CASE WHEN g % 3 = 1 THEN now() - g * interval '1 second' END,
            now() - g * interval '1 second'
       FROM generate_series(1, $1::int) g`,
    [LIVE],
  );
  // The journal: a step per finished episode, two per running one, the last just now (not quiet).
  await timed(
    'steps',
    `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, created_at)
     SELECT e.id, s, 'step', 's' || s, coalesce(e.finished_at, now())
       FROM cyclium_episodes e, generate_series(1, CASE WHEN e.status = 'running' THEN 2 ELSE 1 END) s
      WHERE e.status IN ('done', 'failed', 'canceled', 'running')
      ORDER BY e.id, s`,
  );
  // Checkpoints stay with the runs that did not converge: the running ones and the failed history.
  await timed(
    'checkpoints',
    `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, state)
     SELECT id, 1, '{}'::jsonb FROM cyclium_episodes WHERE status IN ('running', 'failed') ORDER BY id`,
  );
  // Claims: every keyed episode's and every running one's; live ones held for an hour. Written as a
  // database migrated from a release before migration 31 holds them (its copy follows), not row by
  // row through the triggers that mirror each claim write into its episode's row.
  await client.query(`ALTER TABLE cyclium_work_claims DISABLE TRIGGER USER`);
  await timed(
    'claims',
    `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, finished_at)
     SELECT coalesce(dedupe_key, 'episode:' || id),
            CASE WHEN status = 'running' THEN 'claimed' WHEN status = 'failed' THEN 'failed' ELSE 'done' END,
            coalesce(owner_node, 'old-node-0'), CASE WHEN status = 'running' THEN now() + interval '1 hour' ELSE finished_at END,
            coalesce(started_at, inserted_at), finished_at
       FROM cyclium_episodes
      WHERE (dedupe_key IS NOT NULL AND status IN ('done', 'failed', 'canceled')) OR status = 'running'
      ORDER BY 1`,
  );
  await client.query(`ALTER TABLE cyclium_work_claims ENABLE TRIGGER USER`);
  await timed(
    'claim columns',
    `UPDATE cyclium_episodes e
        SET claim_owner = c.owner_node, claim_fence = c.fence, claim_state = c.state,
            claim_lease_until = c.lease_until, claim_attempt = c.attempt
       FROM cyclium_work_claims c
      WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id) AND e.status = 'running'`,
  );
  // Trigger requests: those of past manual episodes, ended; a pending one per deferred episode.
  await timed(
    'requests',
    `INSERT INTO cyclium_trigger_requests (id, episode_id, actor_id, expectation_id, source_node, source_env, status, claimed_by, inserted_at, completed_at)
     SELECT gen_random_uuid(), id, actor_id, expectation_id, 'old-node-1', source_env,
            CASE WHEN status = 'deferred' THEN 'pending' WHEN status = 'failed' THEN 'expired' ELSE 'completed' END,
            CASE WHEN status <> 'deferred' THEN owner_node END, inserted_at, finished_at
       FROM cyclium_episodes
      WHERE status = 'deferred' OR (trigger_type = 'manual' AND dedupe_key IS NULL)
      ORDER BY 1`,
  );
  await timed(
    'outputs',
    `INSERT INTO cyclium_outputs (id, episode_id, type, dedupe_key, status, attempts, source_env, inserted_at, delivered_at)
     SELECT gen_random_uuid(), id, 'notify', 'out:' || id, 'delivered', 1, source_env, finished_at, finished_at
       FROM cyclium_episodes
      WHERE trigger_type = 'event' AND dedupe_key IS NULL
      ORDER BY 1`,
  );
  for (const { definition } of indexes) await timed('index', definition);
  // The live nodes beat (ahead, so they stay alive for the length of the test) and host every actor.
  await client.query(
    `INSERT INTO cyclium_nodes (node_identity, mode, hostname, pid, version, last_seen_at)
     SELECT 'live-node-' || g, 'full', 'host', 1, '0.0.0', now() + interval '1 hour' FROM generate_series(0, 3) g`,
  );
}
