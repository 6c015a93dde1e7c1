/**
 * An episode's claim in its own row (migration 31 and the release that claims there). A begin of a
 * new episode writes its claim into the row it inserts, and nowhere else; renewals, the end and
 * proofs use the row. A takeover goes through cyclium_work_claims, whose triggers carry every
 * claim-table write into the episode row and make it honour a claim the row holds alone: an
 * acquire is busy while that claim is live and takes a higher fence after it lapses, a holder of
 * the generation it replaced writes nothing, and a takeover that races one writes nothing either.
 * A row claim of another node is spelled by hand here, on the columns this release uses.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import {
  Actor,
  CycliumStatus,
  Episodes,
  Expectation,
  WorkClaims,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let openGate: () => void = () => undefined;
const gate = () => new Promise<void>((resolve) => (openGate = resolve));

@Injectable()
@Actor({ id: 'row_claims' })
class RowClaimsActor {
  @Expectation({ id: 'gated', trigger: 'manual' })
  async gated(ep: EpisodeContext): Promise<void> {
    await ep.step('wait', () => gate());
  }

  @Expectation({ id: 'ok', trigger: 'manual', recoveryPolicy: 'restart' })
  async ok(ep: EpisodeContext): Promise<void> {
    await ep.step('one', () => 1);
  }

  @Expectation({ id: 'boom', trigger: 'manual' })
  async boom(ep: EpisodeContext): Promise<never> {
    await ep.step('one', () => 1);
    throw new Error('boom');
  }
}

interface Pair {
  table: Record<string, unknown> | undefined;
  row: Record<string, unknown> | undefined;
}

describe("an episode's claim in its own row", () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const NODE = 'row-node';

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: NODE,
        workClaims: 'postgres',
        workClaimsLeaseSeconds: 0.9,
        recovery: { settleMs: 0, intervalMs: 200, staleAfterMs: 500 },
      },
      providers: [RowClaimsActor],
    });
  });

  afterAll(async () => {
    openGate();
    await app?.close();
  });

  /** Episode `id`'s claim as the table holds it and as its row does, in the same columns. */
  const pair = async (id: string): Promise<Pair> => {
    const { rows } = await database.db.query<Pair>(
      `SELECT (SELECT to_jsonb(c) FROM (
                 SELECT owner_node AS owner, fence, state, lease_until, attempt
                   FROM cyclium_work_claims
                  WHERE dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)) c) AS table,
              (SELECT to_jsonb(r) FROM (
                 SELECT e.claim_owner AS owner, e.claim_fence AS fence, e.claim_state AS state,
                        e.claim_lease_until AS lease_until, e.claim_attempt AS attempt) r) AS row
         FROM cyclium_episodes e WHERE e.id = $1`,
      [id],
    );
    return rows[0];
  };

  const trigger = async (expectation: string, dedupeKey?: string): Promise<string> => {
    const answer = await app
      .get(Episodes)
      .trigger('row_claims', expectation, {}, dedupeKey === undefined ? {} : { dedupeKey });
    return (answer as { episode: { id: string } }).episode.id;
  };

  const status = async (id: string) =>
    (await database.db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id])).rows[0]
      ?.status as string;

  it("holds a new episode's claim in its row alone, from the begin through renewals to the end", async () => {
    const running = await trigger('gated');
    const begun = await pair(running);
    expect(begun).toEqual({
      table: null,
      row: expect.objectContaining({ owner: NODE, fence: 1, state: 'claimed', attempt: 1 }),
    });
    // Renewed (every lease / 3) by the node's renewer, in the row.
    await waitFor(
      'a renewal of the running claim',
      async () => {
        const now = await pair(running);
        return now.row?.lease_until !== begun.row?.lease_until;
      },
      5_000,
    );
    const renewed = await pair(running);
    expect(renewed).toEqual({
      table: null,
      row: expect.objectContaining({ owner: NODE, fence: 1, state: 'claimed' }),
    });
    openGate();
    await waitFor('the gated episode to end', async () => (await status(running)) === 'done');
    expect(await pair(running)).toEqual({
      table: null,
      row: expect.objectContaining({ owner: NODE, fence: 1, state: 'done' }),
    });

    // A failed end; and a begin with a dedupe key, whose key the claim table holds (a later
    // episode may reuse it), the row mirroring it.
    const failed = await trigger('boom');
    const deduped = await trigger('ok', `row-claims-${randomUUID()}`);
    await waitFor(
      'both to end',
      async () => (await status(failed)) === 'failed' && (await status(deduped)) === 'done',
    );
    expect(await pair(failed)).toEqual({
      table: null,
      row: expect.objectContaining({ owner: NODE, state: 'failed' }),
    });
    const dedupedPair = await pair(deduped);
    expect(dedupedPair.table).toMatchObject({ owner: NODE, state: 'done' });
    expect(dedupedPair.row).toEqual(dedupedPair.table);
  });

  it("counts a claim held in its row among its node's live claims, and lists it once lapsed", async () => {
    const running = await trigger('gated');
    const counts = async () => {
      const { rows } = await database.db.query<{ table: number }>(
        `SELECT count(*)::int AS table FROM cyclium_work_claims
          WHERE owner_node = $1 AND state = 'claimed' AND lease_until > now()`,
        [NODE],
      );
      const cluster = await app.get(CycliumStatus).cluster();
      return {
        table: rows[0]?.table ?? 0,
        status: cluster.nodes.find((n) => n.identity === NODE)?.liveClaims,
      };
    };
    expect((await pair(running)).table).toBeNull();
    const { table, status: live } = await counts();
    expect(live).toBe(table + 1);

    // A lapsed row claim of an episode no node of this env sweeps: reclaimExpired lists it.
    const id = randomUUID();
    await database.db.query(
      `INSERT INTO cyclium_episodes
         (id, actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node,
          max_attempts, started_at, source_env, claim_owner, claim_fence, claim_state,
          claim_lease_until, claim_attempt)
       VALUES ($1, 'row_claims', 'ok', 'manual', '{"type":"manual","payload":{}}', 'running', 'v3',
               1, now(), 'elsewhere', 'v3', 2, 'claimed', now() - interval '1 second', 1)`,
      [id],
    );
    const expired = await app.get(WorkClaims).reclaimExpired(1_000);
    expect(expired.filter((c) => c.dedupeKey === `episode:${id}`)).toEqual([
      expect.objectContaining({ ownerNode: 'v3', fence: 2, workType: null }),
    ]);
    expect(expired.some((c) => c.dedupeKey === `episode:${running}`)).toBe(false);
    await waitFor('the gated episode to end', async () => {
      openGate();
      return (await status(running)) === 'done';
    });
  });

  /**
   * A running episode a node `v3` began claiming in rows: its claim in the row alone, live for
   * `leaseSeconds`, its journal quiet for a minute (an orphan to the sweep, were it not held).
   */
  const heldInRowOnly = async (
    leaseSeconds: number,
    env: string | null = null,
  ): Promise<string> => {
    const id = randomUUID();
    await database.db.query(
      `INSERT INTO cyclium_episodes
         (id, actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node,
          max_attempts, started_at, inserted_at, updated_at, source_env, claim_owner, claim_fence,
          claim_state, claim_lease_until, claim_attempt)
       VALUES ($1, 'row_claims', 'ok', 'manual', '{"type":"manual","payload":{}}', 'running', 'v3',
               1, now() - interval '1 minute', now() - interval '1 minute',
               now() - interval '1 minute', $3, 'v3', 4, 'claimed',
               now() + make_interval(secs => $2), 1)`,
      [id, leaseSeconds, env],
    );
    return id;
  };

  const sweepsAfter = async (count: number) => {
    const at = async () =>
      (
        await database.db.query(
          `SELECT last_sweep->>'at' AS at FROM cyclium_nodes WHERE node_identity = $1`,
          [NODE],
        )
      ).rows[0]?.at as string | undefined;
    for (let i = 0; i < count; i++) {
      const before = await at();
      await waitFor('a recovery sweep', async () => (await at()) !== before, 5_000, 50);
    }
  };

  it("leaves an episode held in its row alone, and takes it over above that row's fence once the lease lapses", async () => {
    const id = await heldInRowOnly(3_600);
    await sweepsAfter(3);
    expect(await status(id)).toBe('running');
    expect(await pair(id)).toEqual({
      table: null,
      row: expect.objectContaining({ owner: 'v3', fence: 4, state: 'claimed' }),
    });

    // Its holder died: its lease lapses, and this node's sweep takes it over.
    await database.db.query(
      `UPDATE cyclium_episodes SET claim_lease_until = now() - interval '1 second' WHERE id = $1`,
      [id],
    );
    await waitFor(
      'the lapsed episode to be recovered and end',
      async () => (await status(id)) === 'done',
    );
    const { table, row } = await pair(id);
    // Taken over as a lapsed claim-table row would be: the attempt counted on from the row's.
    expect(table).toMatchObject({ owner: NODE, fence: 5, state: 'done', attempt: 2 });
    expect(row).toEqual(table);
  });

  it('renews, proves, releases and finishes a claim held in its row alone, at its fence only', async () => {
    const claims = app.get(WorkClaims);
    const id = await heldInRowOnly(3_600);
    const key = `episode:${id}`;
    const before = (await pair(id)).row;
    expect(await claims.owns(key, 'v3', 4)).toBe(true);
    expect(await claims.owns(key, 'v3', 3)).toBe(false);
    expect(await claims.owns(key, NODE, 4)).toBe(false);
    expect(await claims.renew(key, 'v3', 7_200, 3)).toBe('not_owner');
    expect(await claims.renew(key, 'v3', 7_200, 4)).toBe('ok');
    const renewed = (await pair(id)).row;
    expect(new Date(String(renewed?.lease_until)).getTime()).toBeGreaterThan(
      new Date(String(before?.lease_until)).getTime(),
    );
    expect(await claims.complete(key, NODE, 4)).toBe('not_owner');
    expect(await claims.fail(key, 'v3', 'late', 3)).toBe('not_owner');
    expect(await claims.complete(key, 'v3', 4)).toBe('ok');
    expect(await pair(id)).toEqual({
      table: null,
      row: expect.objectContaining({ owner: 'v3', fence: 4, state: 'done' }),
    });
    expect(await claims.owns(key, 'v3', 4)).toBe(false);

    // A drain's release lapses the lease in the row; the claim stays `claimed`, free to take (in
    // an env this node does not sweep, so that nobody takes it meanwhile).
    const released = await heldInRowOnly(3_600, 'elsewhere');
    expect(await claims.releaseAll([`episode:${released}`], 'v3')).toBe(1);
    expect(await claims.owns(`episode:${released}`, 'v3', 4)).toBe(false);
    expect((await pair(released)).row).toMatchObject({ owner: 'v3', state: 'claimed' });
  });

  it('lets no write of a generation the row has moved past through, and answers busy while the row claim is live', async () => {
    const claims = app.get(WorkClaims);
    // Elsewhere, so that this node's sweep leaves the staged lapsed claim row alone.
    const id = await heldInRowOnly(3_600, 'elsewhere');
    const key = `episode:${id}`;
    // A claim table row of an older generation, as a table claimer left it before a row claimer's
    // node took the episode over in the row (the mirror is bypassed to stage it).
    await database.db.query(`ALTER TABLE cyclium_work_claims DISABLE TRIGGER USER`);
    try {
      await database.db.query(
        `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at,
                                          last_heartbeat_at, attempt, fence)
         VALUES ($1, 'claimed', $2, now() - interval '1 second', now(), now(), 1, 3)`,
        [key, NODE],
      );
    } finally {
      await database.db.query(`ALTER TABLE cyclium_work_claims ENABLE TRIGGER USER`);
    }

    expect(await claims.complete(key, NODE, 3)).not.toBe('ok');
    expect(await claims.fail(key, NODE, 'late', 3)).not.toBe('ok');
    expect(await claims.acquire(key)).toMatchObject({ status: 'busy' });
    const { table, row } = await pair(id);
    expect(table).toMatchObject({ owner: NODE, fence: 3, state: 'claimed' });
    expect(row).toMatchObject({ owner: 'v3', fence: 4, state: 'claimed' });
  });

  it('answers busy to a takeover that races a claim taken in the row, having written nothing', async () => {
    const claims = app.get(WorkClaims);
    // In an env this node does not sweep: its sweep would race for the lapsed claim too, and wait
    // on the row beside the acquire (a loaded CI saw two waiting, never the one awaited below).
    const id = await heldInRowOnly(-1, 'elsewhere');
    const key = `episode:${id}`;
    const other = await database.db.connect();
    try {
      // A row claimer takes the lapsed row claim, and has not committed yet.
      await other.query('BEGIN');
      await other.query(
        `UPDATE cyclium_episodes
            SET claim_owner = 'v3b', claim_fence = claim_fence + 1,
                claim_lease_until = now() + interval '1 hour'
          WHERE id = $1`,
        [id],
      );
      // This node's acquire saw the row claim lapsed; its mirror waits for that row.
      const acquiring = claims.acquire(key);
      acquiring.catch(() => undefined);
      await waitFor(
        'the acquire to wait for the row',
        async () =>
          (
            await database.db.query(
              `SELECT 1 FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'`,
            )
          ).rowCount === 1,
        5_000,
        20,
      );
      await other.query('COMMIT');
      // The trigger's serialization failure rolled the insert back: busy.
      await expect(acquiring).resolves.toEqual({ status: 'busy' });
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      other.release();
    }
    const { table, row } = await pair(id);
    expect(table).toBeNull();
    expect(row).toMatchObject({ owner: 'v3b', fence: 5, state: 'claimed' });
  });
});
