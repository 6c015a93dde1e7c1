/**
 * A run's writes find their episode and its claim by key, whatever the statistics say of the
 * status they check. The trap: a table analysed while nothing ran (a quiet night, a new database)
 * holds no `running` episode and no `claimed` claim in its statistics, so the planner reckons a
 * check of that status matches one row and may reach the row through the partial index of that
 * status (cyclium_episodes_unfinished, cyclium_work_claims_live), testing the key there. A pooled
 * connection keeps that generic plan, and once thousands run, every end reads all of them.
 *
 * The statements are the real ones, sent by an in-process node running episodes alone and eight at
 * once, with and without a dedupe key (a claim in the episode row, a claim in the claim table), and
 * by a node with claims off.
 * The tables are then analysed with nothing running, thousands of running episodes and live claims
 * are added after, and each statement's generic plan is explained on a connection of the test's
 * own.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { Episodes } from '@cyclium/nestjs';
import pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase } from './support/database.js';
import { genericPlan, nodesOf, watchPreparedStatements } from './support/plan-nodes.js';
import { TWO_STEPS_AT_ONCE, TwoStepActor } from './support/two-step-actor.js';
import { waitFor } from './support/wait-for.js';

const AT_ONCE = TWO_STEPS_AT_ONCE;
const NODE = 'keyed-node';
/** Running episodes and live claims added after the tables were analysed. */
const ADDED = 3_000;
const STATUS_INDEXES = new Set(['cyclium_episodes_unfinished', 'cyclium_work_claims_live']);

/** A run's writes, by a piece of their text: each step's and each end's. */
const WRITES: Array<[string, RegExp]> = [
  ['step', /INSERT INTO cyclium_episode_checkpoints/],
  ['end', /DELETE FROM cyclium_episode_checkpoints/],
];

describe('a run writes by key on statistics taken while nothing ran', () => {
  let own: pg.Client;
  let app: INestApplicationContext | undefined;
  /** A node with claims off: its writes prove ownership on the episode row (runningHere). */
  let open: INestApplicationContext | undefined;
  let unwatch: (() => void) | undefined;
  /** Each shape of write seen (kind, batched or lone, claim table or row): its text. */
  const seen = new Map<string, string>();
  /** How the episodes running now hold their claims, as the keys of `seen` spell it. */
  let shape = '';

  beforeAll(async () => {
    const url = await freshDatabase();
    own = new pg.Client({ connectionString: url });
    own.on('error', () => undefined);
    await own.connect();
    for (const table of ['cyclium_episodes', 'cyclium_episode_steps', 'cyclium_work_claims'])
      await own.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    unwatch = watchPreparedStatements((config) => {
      const kind = WRITES.find(([, pattern]) => pattern.test(config.text))?.[0];
      const batch = (config.values ?? []).some((v) => Array.isArray(v) && v.length > 1);
      const key = `${kind} ${batch ? 'batched' : 'lone'}${shape}`;
      if (kind && !seen.has(key)) seen.set(key, config.text);
    });
    app = await startCycliumApp({
      url,
      cyclium: {
        nodeIdentity: NODE,
        workClaims: 'postgres',
        bus: 'local',
        recovery: { onBoot: false },
      },
      providers: [TwoStepActor],
      poolSize: AT_ONCE + 2,
    });
    open = await startCycliumApp({
      url,
      cyclium: { nodeIdentity: 'open-node', bus: 'local', recovery: { onBoot: false } },
      providers: [TwoStepActor],
      poolSize: AT_ONCE + 2,
    });
  }, 60_000);

  afterAll(async () => {
    unwatch?.();
    await open?.close();
    await app?.close();
    await own?.end();
  });

  /** Runs `count` episodes at once (with dedupe keys when `keyed`) and waits for them to end. */
  async function runAtOnce(
    node: INestApplicationContext | undefined,
    count: number,
    keyed: boolean,
    round: number,
  ): Promise<void> {
    const episodes = (node as INestApplicationContext).get(Episodes);
    const started = await Promise.all(
      Array.from({ length: count }, (_, n) =>
        episodes.trigger(
          'two-step',
          'run',
          { n },
          keyed ? { dedupeKey: `keyed-${round}-${n}` } : undefined,
        ),
      ),
    );
    const ids = started.map((r) => ('episode' in r ? r.episode.id : null));
    await waitFor('the episodes to end', async () => {
      const { rows } = await own.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1::uuid[]) AND status = 'done'`,
        [ids],
      );
      return rows[0]?.n === count;
    });
  }

  it('reads each episode and claim through its key, not through the index of its status', async () => {
    let round = 0;
    const shapes: Array<[string, INestApplicationContext | undefined, boolean]> = [
      ['', app, false],
      [' (claim table)', app, true],
      [' (claims off)', open, false],
    ];
    for (const [name, node, keyed] of shapes) {
      shape = name;
      await runAtOnce(node, 1, keyed, round++);
      await runAtOnce(node, AT_ONCE, keyed, round++);
    }
    // With claims off, a node sends each write alone.
    expect([...seen.keys()].sort()).toEqual([
      'end batched',
      'end batched (claim table)',
      'end lone',
      'end lone (claim table)',
      'end lone (claims off)',
      'step batched',
      'step batched (claim table)',
      'step lone',
      'step lone (claim table)',
      'step lone (claims off)',
    ]);

    // The state under test: statistics of tables where nothing ran, then thousands running.
    await own.query('ANALYZE cyclium_episodes, cyclium_work_claims, cyclium_episode_steps');
    const { rows: live } = await own.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM cyclium_episodes WHERE status <> 'done')
            + (SELECT count(*) FROM cyclium_work_claims WHERE state = 'claimed') AS n`,
    );
    expect(Number(live[0]?.n)).toBe(0);
    await own.query(
      `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, trigger_ref,
         status, owner_node, max_attempts, started_at, claim_owner, claim_fence, claim_state,
         claim_lease_until, claim_attempt)
       SELECT gen_random_uuid(), 'two-step', 'run', 'manual', '{}'::jsonb, 'running', $1, 3, now(),
              $1, 1, 'claimed', now() + interval '1 hour', 1
         FROM generate_series(1, $2::int)`,
      [NODE, ADDED],
    );
    await own.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at,
         last_heartbeat_at, attempt, fence)
       SELECT 'host-key-' || n, 'claimed', $1, now() + interval '1 hour', now(), now(), 1, 1
         FROM generate_series(1, $2::int) n`,
      [NODE, ADDED],
    );

    const problems: string[] = [];
    let statement = 0;
    for (const [key, text] of seen) {
      const nodes = nodesOf(await genericPlan(own, `keyed_${statement++}`, text));
      for (const node of nodes)
        if (STATUS_INDEXES.has(node['Index Name'] ?? ''))
          problems.push(`${key}: ${node['Relation Name']} read through ${node['Index Name']}`);
      if (!nodes.some((node) => node['Index Name'] === 'cyclium_episodes_pkey'))
        problems.push(`${key}: no episode read by cyclium_episodes_pkey`);
    }
    expect(problems).toEqual([]);
  });
});
