/**
 * A batched begin, step and end keep reading the tables by key on the generic plan a connection
 * keeps for its prepared statement, when that plan is made while the tables are small: the state
 * of a new database, or of a deploy's first minutes, before autovacuum has analysed them.
 *
 * The statements are the real ones, sent by an in-process node that runs eight episodes at once so
 * its writes leave in batches; each is then prepared on a connection of the test's own and its
 * generic plan explained there, on the same small tables.
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
const TABLES = /^cyclium_(episodes|episode_steps|episode_checkpoints|work_claims)$/;

/** The batched writes this test needs, by a piece of their text. */
const BATCHES: Array<[string, RegExp]> = [
  // Begins with dedupe keys: each looks for its key's claim row (row-first or in the table).
  ['begin_keyed', /INSERT INTO cyclium_episodes[\s\S]*claim_seen/],
  ['begin', /INSERT INTO cyclium_episodes/],
  ['step', /INSERT INTO cyclium_episode_checkpoints/],
  ['end', /DELETE FROM cyclium_episode_checkpoints/],
];

describe('batched writes on tables not yet analysed', () => {
  let own: pg.Client;
  let app: INestApplicationContext | undefined;
  let unwatch: (() => void) | undefined;
  /** The text of each batch seen, by its name in BATCHES. */
  const seen = new Map<string, string>();

  beforeAll(async () => {
    const url = await freshDatabase();
    own = new pg.Client({ connectionString: url });
    own.on('error', () => undefined);
    await own.connect();
    const { rows } = await own.query<{ analysed: number }>(
      `SELECT count(*)::int AS analysed FROM pg_class
        WHERE relname LIKE 'cyclium%' AND relkind = 'r' AND reltuples >= 0`,
    );
    // The state under test: PostgreSQL has never measured these tables.
    expect(rows[0]?.analysed).toBe(0);
    for (const table of ['cyclium_episodes', 'cyclium_episode_steps', 'cyclium_work_claims'])
      await own.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    unwatch = watchPreparedStatements((config) => {
      if (!/unnest\(/.test(config.text)) return;
      // A batch: the parameter arrays carry more than one row.
      const batch = (config.values ?? []).some((v) => Array.isArray(v) && v.length > 1);
      const kind = BATCHES.find(([, pattern]) => pattern.test(config.text))?.[0];
      if (batch && kind && !seen.has(kind)) seen.set(kind, config.text);
    });
    app = await startCycliumApp({
      url,
      cyclium: {
        nodeIdentity: 'batch-node',
        workClaims: 'postgres',
        bus: 'local',
        recovery: { onBoot: false },
      },
      providers: [TwoStepActor],
      poolSize: AT_ONCE + 2,
    });
  }, 60_000);

  afterAll(async () => {
    unwatch?.();
    await app?.close();
    await own?.end();
  });

  it('reads episodes, steps and claims through their keys, never a whole table', async () => {
    const episodes = (app as INestApplicationContext).get(Episodes);
    for (let round = 0; round < 6 && seen.size < BATCHES.length; round++) {
      // Every other round with dedupe keys.
      const started = await Promise.all(
        Array.from({ length: AT_ONCE }, (_, n) =>
          episodes.trigger(
            'two-step',
            'run',
            { n },
            round % 2 === 0 ? {} : { dedupeKey: `plans-${round}-${n}` },
          ),
        ),
      );
      const ids = started.map((r) => ('episode' in r ? r.episode.id : null));
      await waitFor('the round to finish', async () => {
        const { rows } = await own.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1::uuid[]) AND status = 'done'`,
          [ids],
        );
        return rows[0]?.n === AT_ONCE;
      });
    }
    expect([...seen.keys()].sort()).toEqual(BATCHES.map(([kind]) => kind).sort());

    const problems: string[] = [];
    for (const [kind, text] of seen) {
      const nodes = nodesOf(await genericPlan(own, `batch_${kind}`, text));
      for (const node of nodes)
        if (node['Node Type'] === 'Seq Scan' && TABLES.test(node['Relation Name'] ?? ''))
          problems.push(`${kind}: Seq Scan on ${node['Relation Name']}`);
      // A step's and an end's proof and update find each episode by its primary key.
      if (
        !kind.startsWith('begin') &&
        !nodes.some((node) => node['Index Name'] === 'cyclium_episodes_pkey')
      )
        problems.push(`${kind}: no episode read by cyclium_episodes_pkey`);
    }
    expect(problems).toEqual([]);
  });
});
