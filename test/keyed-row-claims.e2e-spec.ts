/**
 * A new episode with one of the library's own dedupe keys (an event's, a schedule's, a child's)
 * takes its first claim in its own row, as a keyless one does, when the claim table has no row for
 * the key; a host's manual key, and a key the table already has, still claim in the table, the row
 * mirroring it. The row's claim answers to the dedupe key wherever a claim is read: proofs,
 * renewals, the list of lapsed claims, and the table's triggers, which make an acquire busy while
 * the row's claim is live and lift a takeover above the row's fence once it lapses.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { WorkClaims } from '@cyclium/nestjs';
import { BeginWrites } from '../libs/cyclium/src/episodes/begin-writes.js';
import type { BeginOutcome } from '../libs/cyclium/src/episodes/episode-statements.js';
import { EpisodeStatements } from '../libs/cyclium/src/episodes/episode-statements.js';
import type { NewEpisode } from '../libs/cyclium/src/episodes/episode-inserts.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';

const NODE = 'keyed-rows';

interface Claims {
  key: string;
  table: { owner: string; fence: number; state: string } | null;
  row: { owner: string; fence: number; state: string } | null;
  tx: string;
}

describe("a library-keyed episode's first claim in its row", () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: NODE, workClaims: 'postgres', bus: 'local' },
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  // In an env this node does not sweep, so no recovery takes a staged lapse meanwhile.
  const spec = (dedupeKey: string | null, type: 'event' | 'manual' = 'event'): NewEpisode => ({
    actorId: 'keyed',
    expectationId: 'x',
    trigger: { type, payload: { dedupeKey } },
    dedupeKey,
    status: 'running',
    ownerNode: NODE,
    maxAttempts: 3,
    sourceStack: null,
    sourceEnv: 'elsewhere',
  });

  const claims = async (ids: string[]): Promise<Claims[]> =>
    (
      await database.db.query<Claims>(
        `SELECT coalesce(e.dedupe_key, 'episode:' || e.id) AS key, e.xmin::text AS tx,
                (SELECT jsonb_build_object('owner', c.owner_node, 'fence', c.fence, 'state', c.state)
                   FROM cyclium_work_claims c
                  WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)) AS table,
                CASE WHEN e.claim_fence IS NOT NULL THEN jsonb_build_object(
                  'owner', e.claim_owner, 'fence', e.claim_fence, 'state', e.claim_state) END AS row
           FROM cyclium_episodes e WHERE e.id = ANY($1::uuid[]) ORDER BY key`,
        [ids],
      )
    ).rows;

  const started = (outcome: BeginOutcome) => {
    if (outcome.status !== 'started' || outcome.grant.status !== 'acquired')
      throw new Error(`not started: ${outcome.status}`);
    return outcome;
  };

  it('claims a new event-keyed episode in its row, alone and batched; a manual key and a key the table has claim in the table', async () => {
    // A finished claim and another node's lapsed lease, on keys no live episode has.
    await database.db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence, finished_at)
       VALUES ('k1-done', 'done', 'earlier', now(), now(), now(), 1, 4, now()),
              ('k1-lapsed', 'claimed', 'gone', now() - interval '1 minute', now(), now(), 1, 7, NULL)`,
    );
    const alone = started(await app.get(EpisodeStatements).begin(spec('k1-alone')));
    const begins = app.get(BeginWrites);
    const batch = (
      await Promise.all([
        begins.begin(spec('k1-new')),
        begins.begin(spec('k1-done')),
        begins.begin(spec('k1-lapsed')),
        begins.begin(spec('k1-manual', 'manual')),
        begins.begin(spec(null)),
      ])
    ).map(started);

    const grant = (o: ReturnType<typeof started>) => [
      o.grant.status === 'acquired' ? o.grant.claim.fence : null,
      o.grant.status === 'acquired' ? (o.grant.stolenFrom ?? null) : null,
    ];
    expect(grant(alone)).toEqual([1, null]);
    expect(batch.map(grant)).toEqual([
      [1, null],
      [5, null],
      [8, 'gone'],
      [1, null],
      [1, null],
    ]);
    const rows = await claims([alone, ...batch].map((o) => o.episode.id));
    const held = (fence: number) => ({ owner: NODE, fence, state: 'claimed' });
    expect(rows.map(({ key, table, row }) => ({ key, table, row }))).toEqual([
      { key: `episode:${batch[4]?.episode.id}`, table: null, row: held(1) },
      { key: 'k1-alone', table: null, row: held(1) },
      { key: 'k1-done', table: held(5), row: held(5) },
      { key: 'k1-lapsed', table: held(8), row: held(8) },
      { key: 'k1-manual', table: held(1), row: held(1) },
      { key: 'k1-new', table: null, row: held(1) },
    ]);
    // The batch was one statement.
    expect(new Set(rows.filter((r) => r.key !== 'k1-alone').map((r) => r.tx)).size).toBe(1);
  });

  it('answers to its dedupe key: proves, renews, is listed once lapsed, and a takeover rises above its fence', async () => {
    const workClaims = app.get(WorkClaims);
    const key = 'k2-api';
    const { episode } = started(await app.get(EpisodeStatements).begin(spec(key)));
    expect(await workClaims.owns(key, NODE, 1)).toBe(true);
    expect(await workClaims.owns(key, NODE, 2)).toBe(false);
    expect(await workClaims.owns(key, 'other', 1)).toBe(false);
    expect(await workClaims.renew(key, NODE, 60, 1)).toBe('ok');
    // Live in the row: the table's trigger makes an acquire busy, and it writes nothing.
    expect(await workClaims.acquire(key)).toEqual({ status: 'busy' });
    expect(await claims([episode.id])).toEqual([
      expect.objectContaining({ table: null, row: { owner: NODE, fence: 1, state: 'claimed' } }),
    ]);

    // Its holder died: the lease lapses.
    await database.db.query(
      `UPDATE cyclium_episodes SET claim_lease_until = now() - interval '1 second' WHERE id = $1`,
      [episode.id],
    );
    expect(await workClaims.owns(key, NODE, 1)).toBe(false);
    const lapsed = await workClaims.reclaimExpired(1_000);
    expect(lapsed.filter((c) => c.dedupeKey === key)).toEqual([
      expect.objectContaining({ ownerNode: NODE, fence: 1 }),
    ]);

    // Taken over through the table, above the row's fence; the old generation writes nothing.
    const taken = await workClaims.acquire(key);
    expect(taken).toMatchObject({ status: 'acquired', claim: { fence: 2 } });
    expect(await workClaims.complete(key, NODE, 1)).not.toBe('ok');
    expect(await claims([episode.id])).toEqual([
      expect.objectContaining({
        table: { owner: NODE, fence: 2, state: 'claimed' },
        row: { owner: NODE, fence: 2, state: 'claimed' },
      }),
    ]);
    expect(await workClaims.complete(key, NODE, 2)).toBe('ok');
  });
});
