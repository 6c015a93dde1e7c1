/**
 * Begins that arrive together leave as one statement with the guarantees of a lone begin: the
 * dedupe index decides each insert, only an insert that won takes its claim (new, or taken over
 * in the state read), and a busy claim leaves nothing of the batch behind — every begin of it is
 * then made alone and gets its own answer.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { BeginWrites } from '../libs/cyclium/src/episodes/begin-writes.js';
import type { NewEpisode } from '../libs/cyclium/src/episodes/episode-inserts.js';
import { toEpisode } from '../libs/cyclium/src/episodes/episode-store.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';

describe('batched begins', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let begins: BeginWrites;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'beginner', workClaims: 'postgres', bus: 'local' },
    });
    begins = app.get(BeginWrites);
  });

  afterAll(async () => {
    await app?.close();
  });

  const spec = (dedupeKey: string | null): NewEpisode => ({
    actorId: 'batch',
    expectationId: 'x',
    trigger: { type: 'manual', payload: { dedupeKey } },
    dedupeKey,
    status: 'running',
    ownerNode: 'beginner',
    maxAttempts: 3,
    sourceStack: null,
    sourceEnv: null,
  });

  const live = async (keys: string[]) =>
    (
      await database.db.query(
        `SELECT e.dedupe_key, e.status, e.owner_node, e.xmin::text AS tx, c.owner_node AS claim_owner, c.fence::int AS fence, c.state AS claim
           FROM cyclium_episodes e LEFT JOIN cyclium_work_claims c ON c.dedupe_key = e.dedupe_key
          WHERE e.dedupe_key = ANY($1::text[]) AND e.archived_at IS NULL ORDER BY e.dedupe_key`,
        [keys],
      )
    ).rows;

  it('inserts and claims a batch in one transaction; a duplicate writes nothing; finished and lapsed claims are taken over', async () => {
    const keys = ['b1-dup', 'b1-new-1', 'b1-new-2', 'b1-done', 'b1-lapsed'];
    const first = await begins.begin(spec('b1-dup'));
    expect(first.status).toBe('started');
    // A finished claim and another node's lapsed lease, on keys no live episode has.
    await database.db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence, finished_at)
       VALUES ('b1-done', 'done', 'earlier', now(), now(), now(), 1, 4, now()),
              ('b1-lapsed', 'claimed', 'gone', now() - interval '1 minute', now(), now(), 1, 7, NULL)`,
    );

    const outcomes = await Promise.all(keys.map((key) => begins.begin(spec(key))));

    expect(outcomes.map((o) => o.status)).toEqual([
      'duplicate',
      'started',
      'started',
      'started',
      'started',
    ]);
    const grants = outcomes.map((o) =>
      o.status === 'started' && o.grant.status === 'acquired'
        ? [o.grant.claim.fence, o.grant.stolenFrom ?? null]
        : null,
    );
    expect(grants).toEqual([null, [1, null], [1, null], [5, null], [8, 'gone']]);
    const rows = await live(keys);
    expect(rows.map((r: { dedupe_key: string }) => r.dedupe_key)).toEqual([
      'b1-done',
      'b1-dup',
      'b1-lapsed',
      'b1-new-1',
      'b1-new-2',
    ]);
    expect(
      rows.every(
        (r: { status: string; claim_owner: string; claim: string }) =>
          r.status === 'running' && r.claim_owner === 'beginner' && r.claim === 'claimed',
      ),
    ).toBe(true);
    const batched = rows.filter((r: { dedupe_key: string }) => r.dedupe_key !== 'b1-dup');
    expect(new Set(batched.map((r: { tx: string }) => r.tx)).size).toBe(1);
  });

  it('a busy claim leaves nothing of the batch; each begin is then made alone', async () => {
    const keys = ['b2-busy', 'b2-a', 'b2-b', 'b2-c'];
    // Another node holds a live lease on a key no live episode has.
    await database.db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence)
       VALUES ('b2-busy', 'claimed', 'other', now() + interval '1 minute', now(), now(), 1, 1)`,
    );

    const outcomes = await Promise.all(keys.map((key) => begins.begin(spec(key))));

    expect(outcomes.map((o) => o.status)).toEqual(['busy', 'started', 'started', 'started']);
    const rows = await live(keys);
    expect(rows.map((r: { dedupe_key: string }) => r.dedupe_key)).toEqual(['b2-a', 'b2-b', 'b2-c']);
    expect(new Set(rows.map((r: { tx: string }) => r.tx)).size).toBe(3);
    const claim = await database.db.query(
      `SELECT owner_node, fence::int AS fence FROM cyclium_work_claims WHERE dedupe_key = 'b2-busy'`,
    );
    expect(claim.rows).toEqual([{ owner_node: 'other', fence: 1 }]);
  });

  it("hands the run the episode as stored, though the begin reads back only the database's columns", async () => {
    // Keys out of jsonb's order: the run must see the trigger as a recovered run reads it.
    const shaped = (dedupeKey: string | null): NewEpisode => ({
      ...spec(dedupeKey),
      trigger: { type: 'manual', payload: { zeta: 1, a: { yy: [2, { d: 1, c: 0 }], b: 'x' } } },
      sourceStack: 'blue',
      sourceEnv: 'prod',
      workflowStepId: 'ws',
      flow: { key: 'tenant-1', rateKey: null, priority: 3 },
      version: 'v7',
    });
    const stored = async (id: string) =>
      toEpisode(
        (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0],
      );

    const alone = await begins.begin(shaped(null));
    const batch = await Promise.all(['b3-a', 'b3-b', null].map((key) => begins.begin(shaped(key))));

    for (const outcome of [alone, ...batch]) {
      if (outcome.status !== 'started') throw new Error(outcome.status);
      const row = await stored(outcome.episode.id);
      expect(outcome.episode).toEqual(row);
      expect(Object.keys(outcome.episode.triggerRef)).toEqual(Object.keys(row.triggerRef));
      expect(JSON.stringify(outcome.episode.triggerRef)).toBe(JSON.stringify(row.triggerRef));
    }
    expect(JSON.stringify((alone as { episode: { triggerRef: unknown } }).episode.triggerRef)).toBe(
      '{"type":"manual","payload":{"a":{"b":"x","yy":[2,{"c":0,"d":1}]},"zeta":1}}',
    );
  });
});
