import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

@Injectable()
@Actor({ id: 'begin', maxConcurrentEpisodes: 50 })
class BeginActor {
  @Expectation({ id: 'x', trigger: 'manual' })
  async x(ep: EpisodeContext): Promise<void> {
    await ep.step('only', () => 1);
  }
}

/** Begin is one statement now: it must still write nothing at all when it does not start an episode. */
describe('beginning an episode, in one round trip', () => {
  const database = useDatabase();
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    const bus = new LocalBus();
    const node = (id: string) =>
      startCycliumApp({
        url: database.url,
        cyclium: { nodeIdentity: id, workClaims: 'postgres', bus },
        providers: [BeginActor],
      });
    [a, b] = await Promise.all([node('node-a'), node('node-b')]);
  });

  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  const count = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows[0].n as number;

  it('answers busy and writes nothing when a live claim already holds the key', async () => {
    await database.db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until) VALUES ('held-key', 'claimed', 'other', now() + interval '1 hour')`,
    );
    expect(await a.get(Episodes).trigger('begin', 'x', {}, { dedupeKey: 'held-key' })).toEqual({
      status: 'busy',
    });
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE dedupe_key = 'held-key'`),
    ).toBe(0);
    expect(
      (
        await database.db.query(
          `SELECT owner_node, fence FROM cyclium_work_claims WHERE dedupe_key = 'held-key'`,
        )
      ).rows,
    ).toEqual([{ owner_node: 'other', fence: '1' }]);
  });

  it("lets exactly one of many concurrent begins of one key through, on its claim's first fence", async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? a : b).get(Episodes).trigger('begin', 'x', {}, { dedupeKey: 'raced-key' }),
      ),
    );
    expect(results.filter((r) => r.status === 'started')).toHaveLength(1);
    expect(
      results
        .filter((r) => r.status !== 'started')
        .every((r) => r.status === 'duplicate' || r.status === 'busy'),
    ).toBe(true);
    await waitFor(
      'the winner to finish',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE dedupe_key = 'raced-key' AND status = 'done'`,
        )) === 1,
    );
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE dedupe_key = 'raced-key'`),
    ).toBe(1);
    expect(
      (
        await database.db.query(
          `SELECT state, fence FROM cyclium_work_claims WHERE dedupe_key = 'raced-key'`,
        )
      ).rows,
    ).toEqual([{ state: 'done', fence: '1' }]);
    // A finished episode still holds its key: a later trigger is a duplicate and touches no claim.
    expect(await a.get(Episodes).trigger('begin', 'x', {}, { dedupeKey: 'raced-key' })).toEqual({
      status: 'duplicate',
    });
    expect(
      (
        await database.db.query(
          `SELECT fence FROM cyclium_work_claims WHERE dedupe_key = 'raced-key'`,
        )
      ).rows,
    ).toEqual([{ fence: '1' }]);
  });
});
