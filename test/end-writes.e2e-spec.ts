/**
 * Terminal writes that arrive together leave as one statement, and each row of it still proves
 * its own claim at its fence: a stale holder in the batch writes nothing (no status, no claim
 * completion, no checkpoint cleanup, no terminal event) while the others commit together, and a
 * write PostgreSQL refuses fails alone while the rest are written one by one.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { Episodes } from '@cyclium/nestjs';
import { EndWrites } from '../libs/cyclium/src/episodes/end-writes.js';
import type { EndOutcome } from '../libs/cyclium/src/episodes/episode-statements.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { stealClaim } from './support/episode-claims.js';
import { heldEpisodes, type HeldEpisode as Held } from './support/held-episodes.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

describe('batched terminal writes', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let ends: EndWrites;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'ender', workClaims: 'postgres', bus: 'postgres' },
    });
    ends = app.get(EndWrites);
  });

  afterAll(async () => {
    await app?.close();
  });

  /** `n` running episodes, each with a claim this node holds and one checkpoint. */
  async function held(n: number): Promise<Held[]> {
    const episodes = await heldEpisodes(app, 'ender', n);
    await database.db.query(
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state) SELECT id, 1, 's', '{"v":1}' FROM unnest($1::uuid[]) AS id`,
      [episodes.map((e) => e.episode.id)],
    );
    return episodes;
  }

  const done = (e: Held, summary: string): EndOutcome => ({
    terminal: { status: 'done', summary, classification: { summary } },
    event: { type: 'episode.completed', payload: { episodeId: e.episode.id, status: 'done' } },
  });
  const failed = (e: Held): EndOutcome => ({
    terminal: { status: 'failed', errorClass: 'crash', detail: 'boom' },
    event: { type: 'episode.failed', payload: { episodeId: e.episode.id, status: 'failed' } },
  });

  async function state(episodes: Held[]) {
    const ids = episodes.map((e) => e.episode.id);
    const { rows } = await database.db.query(
      `SELECT e.id, e.status, e.summary, e.classification, e.error_class, e.finished_at IS NOT NULL AS finished, e.xmin::text AS tx,
              c.state AS claim, c.owner_node AS claim_owner, c.error_detail AS claim_error,
              (SELECT count(*)::int FROM cyclium_episode_checkpoints k WHERE k.episode_id = e.id) AS checkpoints,
              (SELECT array_agg(v.type ORDER BY v.id) FROM cyclium_events v WHERE v.payload->>'episodeId' = e.id::text) AS events
         FROM cyclium_episodes e JOIN cyclium_work_claims c ON c.dedupe_key = 'episode:' || e.id
        WHERE e.id = ANY($1::uuid[])`,
      [ids],
    );
    return ids.map((id) => rows.find((r: { id: string }) => r.id === id));
  }

  it('writes a batch in one transaction, and a stale holder in it writes nothing', async () => {
    const episodes = await held(5);
    const [stolen, fails, ...rest] = episodes as [Held, Held, Held, Held, Held];
    // Another node took the first claim over (fence + 1); its holder has not noticed.
    await database.db.query(
      `UPDATE cyclium_work_claims SET owner_node = 'thief', fence = fence + 1 WHERE dedupe_key = $1`,
      [stolen.ownership.key],
    );

    const outcomes = await Promise.all([
      ends.end(stolen.episode, stolen.ownership, done(stolen, 'stolen')),
      ends.end(fails.episode, fails.ownership, failed(fails)),
      ...rest.map((e, i) => ends.end(e.episode, e.ownership, done(e, `ok-${i}`))),
    ]);

    expect(outcomes).toEqual([null, [], [], [], []]);
    const [s, f, ...ok] = await state(episodes);
    expect(s).toMatchObject({
      status: 'running',
      summary: null,
      finished: false,
      claim: 'claimed',
      claim_owner: 'thief',
      checkpoints: 1,
      events: null,
    });
    expect(f).toMatchObject({
      status: 'failed',
      error_class: 'crash',
      finished: true,
      claim: 'failed',
      claim_error: 'crash: boom',
      checkpoints: 1,
    });
    expect(f.events).toEqual(['episode.failed']);
    ok.forEach((row, i) => {
      expect(row).toMatchObject({
        status: 'done',
        summary: `ok-${i}`,
        classification: { summary: `ok-${i}` },
        finished: true,
        claim: 'done',
        checkpoints: 0,
      });
      expect(row.events).toEqual(['episode.completed']);
    });
    // The four winners committed in one transaction.
    expect(new Set([f, ...ok].map((r) => r.tx)).size).toBe(1);
  });

  it('fails only the write PostgreSQL refuses, and writes the others one by one', async () => {
    const episodes = await held(4);
    const [bad, ...rest] = episodes as [Held, Held, Held, Held];
    const outcome = done(bad, 'bad');
    // A status the table's check refuses: the batch fails, then this write fails alone.
    outcome.terminal.status = 'no-such-status' as EndOutcome['terminal']['status'];

    const outcomes = await Promise.allSettled([
      ends.end(bad.episode, bad.ownership, outcome),
      ...rest.map((e, i) => ends.end(e.episode, e.ownership, done(e, `alone-${i}`))),
    ]);

    expect(outcomes[0]?.status).toBe('rejected');
    expect(outcomes.slice(1).map((o) => (o.status === 'fulfilled' ? o.value : o.reason))).toEqual([
      [],
      [],
      [],
    ]);
    const [b, ...ok] = await state(episodes);
    expect(b).toMatchObject({ status: 'running', claim: 'claimed', checkpoints: 1, events: null });
    ok.forEach((row) =>
      expect(row).toMatchObject({ status: 'done', claim: 'done', checkpoints: 0 }),
    );
    expect(new Set(ok.map((r) => r.tx)).size).toBe(3);
  });

  it("proves a lone end's claim by finishing it: the claim row is written once, never share-locked first", async () => {
    const [e] = (await held(1)) as [Held];
    const superuser = (
      await database.db.query(`SELECT rolsuper FROM pg_roles WHERE rolname = current_user`)
    ).rows[0]?.rolsuper;
    if (!superuser) {
      console.warn('skipped: reading the WAL (pg_walinspect) needs a superuser');
      return;
    }
    await database.db.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const from = (await database.db.query(`SELECT pg_current_wal_insert_lsn()::text AS lsn`))
      .rows[0].lsn;

    expect(await ends.end(e.episode, e.ownership, done(e, 'alone'))).toEqual([]);

    const to = (await database.db.query(`SELECT pg_current_wal_insert_lsn()::text AS lsn`)).rows[0]
      .lsn;
    // The end's own records on the claims table: its transaction wrote the claim's new version.
    // Besides it, only the exclusive lock an update takes for a BEFORE trigger (migration 31's,
    // which reads the episode row's claim first): no shared lock of a proof (FOR SHARE sets
    // KEYSHR_LOCK), and one write.
    const { rows } = await database.db.query<{ type: string; description: string }>(
      `SELECT b.record_type AS type, b.description
         FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, true) b
        WHERE b.relfilenode = pg_relation_filenode('cyclium_work_claims')
          AND b.xid = (SELECT xmin::text::xid FROM cyclium_work_claims WHERE dedupe_key = $3)`,
      [from, to, e.ownership.key],
    );
    const locks = rows.filter((r) => r.type === 'LOCK');
    expect(locks.map((r) => r.description)).not.toContainEqual(
      expect.stringContaining('KEYSHR_LOCK'),
    );
    expect(locks.length).toBeLessThanOrEqual(1);
    expect(rows.filter((r) => r.type !== 'LOCK').map((r) => r.type)).toEqual([
      expect.stringMatching(/UPDATE$/),
    ]);
    const [row] = await state([e]);
    expect(row).toMatchObject({ status: 'done', claim: 'done', checkpoints: 0 });
  });

  it('proves a lone end of a claim held in its episode row alone on that row: stolen, it writes nothing', async () => {
    // Two running episodes whose claims this node holds in their rows alone, as a begin of a new
    // episode writes them; the first is then taken over in place.
    const inRows = await Promise.all(
      [1, 2].map(async () => {
        const episode = await app.get(Episodes).create({ actorId: 'batch', expectationId: 'x' });
        await database.db.query(
          `UPDATE cyclium_episodes
              SET claim_owner = 'ender', claim_fence = 1, claim_state = 'claimed',
                  claim_lease_until = now() + interval '1 hour', claim_attempt = 1
            WHERE id = $1`,
          [episode.id],
        );
        return { episode, ownership: { key: `episode:${episode.id}`, owner: 'ender', fence: 1 } };
      }),
    );
    const [stolen, kept] = inRows as [Held, Held];
    await stealClaim(database.db, stolen.episode.id);

    expect(await ends.end(stolen.episode, stolen.ownership, done(stolen, 'stolen'))).toBeNull();
    expect(await ends.end(kept.episode, kept.ownership, done(kept, 'kept'))).toEqual([]);

    const rows = await database.db.query(
      `SELECT id, status, summary, claim_owner, claim_fence::int AS fence, claim_state,
              (SELECT count(*)::int FROM cyclium_work_claims c
                WHERE c.dedupe_key = 'episode:' || e.id) AS claim_rows
         FROM cyclium_episodes e WHERE id = ANY($1::uuid[]) ORDER BY id = $2 DESC`,
      [[stolen.episode.id, kept.episode.id], stolen.episode.id],
    );
    expect(rows.rows).toEqual([
      expect.objectContaining({
        status: 'running',
        summary: null,
        claim_owner: 'thief',
        fence: 2,
        claim_state: 'claimed',
        claim_rows: 0,
      }),
      expect.objectContaining({
        status: 'done',
        summary: 'kept',
        claim_owner: 'ender',
        fence: 1,
        claim_state: 'done',
        claim_rows: 0,
      }),
    ]);
  });

  it("writes nothing when the episode's row refuses a lone end after its claim was finished", async () => {
    const [e] = (await held(1)) as [Held];
    const outcome: EndOutcome = {
      ...done(e, 'raced'),
      lastStep: { stepNo: 1, journalNo: 1, name: 'last', resultJson: '1', durationMs: 0 },
    };
    // A cancel asked while the end is under way: its row lock holds the end's own update back
    // until after the end read the row (no cancel then) and finished the claim.
    const canceler = await database.db.connect();
    try {
      await canceler.query('BEGIN');
      await canceler.query(
        `UPDATE cyclium_episodes SET cancel_requested_at = now() WHERE id = $1`,
        [e.episode.id],
      );
      const ending = ends.end(e.episode, e.ownership, outcome);
      await waitFor(
        'the end waiting on the episode row',
        async () =>
          (
            await database.db.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE wait_event_type = 'Lock' AND query LIKE '%cyclium_episodes%'
                  AND pid <> pg_backend_pid()`,
            )
          ).rows[0].n === 1,
      );
      await canceler.query('COMMIT');

      expect(await ending).toBeNull();
    } finally {
      await canceler.query('ROLLBACK').catch(() => undefined);
      canceler.release();
    }
    const [row] = await state([e]);
    expect(row).toMatchObject({
      status: 'running',
      finished: false,
      claim: 'claimed',
      claim_owner: 'ender',
      checkpoints: 1,
      events: null,
    });
    const journal = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_episode_steps WHERE episode_id = $1`,
      [e.episode.id],
    );
    expect(journal.rows[0].n).toBe(0);
  });
});
