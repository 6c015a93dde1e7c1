/**
 * Episodes.list pages newest first by keyset: every episode once, even many inserted in the same
 * millisecond, and a cursor or limit it did not hand out is the caller's mistake, named as such.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { Episodes, InvalidListQueryError } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';

describe('Episodes.list', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let episodes: Episodes;
  const ids: string[] = [];

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lister', bus: 'local' },
    });
    episodes = app.get(Episodes);
    // One multi-row insert: all 23 share inserted_at, so only the id breaks the tie between pages.
    const { rows } = await database.db.query(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, max_attempts)
       SELECT 'lister', 'x', 'manual', '{}'::jsonb, 'done', 1 FROM generate_series(1, 23) RETURNING id`,
    );
    ids.push(...rows.map((r: { id: string }) => r.id));
  });

  afterAll(async () => {
    await app?.close();
  });

  it('walks every episode once, newest first, in pages of the limit', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const { items, nextCursor } = await episodes.list({ actorId: 'lister', limit: 5, cursor });
      expect(items.length).toBeLessThanOrEqual(5);
      seen.push(...items.map((e) => e.id));
      if (!nextCursor) break;
      cursor = nextCursor;
    }
    expect(seen).toHaveLength(23);
    expect(new Set(seen)).toEqual(new Set(ids));
    expect(seen).toEqual([...seen].sort().reverse());
  });

  it('refuses a cursor it did not hand out, and a limit that is not a whole number, naming the field', async () => {
    const forged = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    for (const cursor of [
      'not-a-cursor',
      forged({ a: 1 }),
      forged(['the day after', ids[0]]),
      forged(['2026-01-01 00:00:00+00', 'x']),
    ]) {
      await expect(episodes.list({ cursor })).rejects.toThrow(InvalidListQueryError);
      await expect(episodes.list({ cursor })).rejects.toThrow(
        /cursor .* is not one Episodes.list returned/,
      );
    }
    await expect(episodes.list({ limit: Number.NaN })).rejects.toThrow(
      /limit must be a whole number/,
    );
    // A status no episode can have is a mistake, not an empty page.
    await expect(episodes.list({ status: 'bogus' as never })).rejects.toThrow(
      InvalidListQueryError,
    );
    await expect(episodes.list({ status: 'bogus' as never })).rejects.toThrow(
      /status must be one of queued, throttled, deferred, waiting, running/,
    );
    // An empty cursor is the first page, as from a query string `?cursor=`.
    expect((await episodes.list({ actorId: 'lister', cursor: '' })).items).toHaveLength(23);
  });
});
