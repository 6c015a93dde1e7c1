/**
 * An episode without a dedupe key is new in every way: its row cannot meet a live one's, its claim
 * key is its new id, and its terminal event's id was just minted. So those three rows are written
 * without conflict arbiters, each one WAL record (an arbiter makes a row a speculative insert,
 * confirmed by a second record). An episode with a dedupe key keeps its arbiters: a live duplicate
 * is skipped and a finished claim is taken over, as before (begin-writes, episode-begin).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';
import { readLifecycleEvents } from './support/lifecycle-readers.js';

@Injectable()
@Actor({ id: 'fresh' })
class FreshActor {
  @Expectation({ id: 'one', trigger: 'manual' })
  async one(ep: EpisodeContext): Promise<{ summary: string }> {
    await ep.step('only', () => 1);
    return { summary: 'ok' };
  }
}

const TABLES = ['cyclium_episodes', 'cyclium_work_claims', 'cyclium_events'];

describe('fresh inserts', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let superuser = false;

  beforeAll(async () => {
    superuser = (
      await database.db.query(`SELECT rolsuper FROM pg_roles WHERE rolname = current_user`)
    ).rows[0]?.rolsuper;
    if (superuser) await database.db.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'fresh-node', workClaims: 'postgres', triggerPollIntervalMs: 100 },
      providers: [FreshActor],
    });
    // Something reads the terminal event, so the end writes it.
    await readLifecycleEvents(app, ['episode.completed']);
  });

  afterAll(async () => {
    await app?.close();
  });

  const lsn = async () =>
    (await database.db.query(`SELECT pg_current_wal_insert_lsn()::text AS lsn`)).rows[0].lsn;

  /** Runs one episode to its end; the speculative-insert confirmations its writes left per table. */
  async function confirmations(dedupeKey?: string): Promise<Record<string, number>> {
    const from = await lsn();
    const started = await app
      .get(Episodes)
      .trigger('fresh', 'one', {}, dedupeKey ? { dedupeKey } : {});
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('the episode to end', async () => {
      const { rows } = await database.db.query(
        `SELECT 1 FROM cyclium_events WHERE type = 'episode.completed' AND payload->>'episodeId' = $1`,
        [id],
      );
      return rows.length === 1;
    });
    // The WAL is the cluster's, and every test database is a copy of one template, so another
    // suite's tables carry the same file numbers: only this database's records count.
    const { rows } = await database.db.query(
      `SELECT c.relname AS relation, count(DISTINCT b.start_lsn)::int AS n
         FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, true) b
         JOIN pg_class c ON c.relfilenode = b.relfilenode
        WHERE b.record_type = 'HEAP_CONFIRM' AND c.relname = ANY($3::text[])
          AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
        GROUP BY 1`,
      [from, await lsn(), TABLES],
    );
    const counts = Object.fromEntries(TABLES.map((t) => [t, 0]));
    for (const row of rows as Array<{ relation: string; n: number }>) counts[row.relation] = row.n;
    return counts;
  }

  it('writes an episode without a dedupe key, its claim and its terminal event without arbiters', async () => {
    if (!superuser) {
      console.warn('skipped: reading the WAL (pg_walinspect) needs a superuser');
      return;
    }
    // Twice, so the second run's statements are the prepared ones.
    await confirmations();
    expect(await confirmations()).toEqual({
      cyclium_episodes: 0,
      cyclium_work_claims: 0,
      cyclium_events: 0,
    });
    // A dedupe key keeps the arbiters of the episode row and its claim.
    expect(await confirmations('fresh-keyed')).toEqual({
      cyclium_episodes: 1,
      cyclium_work_claims: 1,
      cyclium_events: 0,
    });
  });
});
