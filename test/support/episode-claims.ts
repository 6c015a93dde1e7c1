import type pg from 'pg';

/** What any `pg` client or pool answers queries with. */
type Queryable = Pick<pg.Pool, 'query'>;

/** An episode's claim, in the claim table's column names. */
export interface EpisodeClaim {
  owner_node: string;
  fence: number;
  state: string;
  lease_until: Date;
  attempt: number;
}

/**
 * Episode `id`'s claim as its row holds it: alone (a new episode's, until a takeover), or as the
 * database mirrors it from cyclium_work_claims (a taken-over or dedupe-keyed one). Undefined when
 * the row never held one.
 */
export async function claimOf(db: Queryable, id: string): Promise<EpisodeClaim | undefined> {
  const { rows } = await db.query<EpisodeClaim>(
    `SELECT claim_owner AS owner_node, claim_fence::int AS fence, claim_state AS state,
            claim_lease_until AS lease_until, claim_attempt AS attempt
       FROM cyclium_episodes WHERE id = $1 AND claim_fence IS NOT NULL`,
    [id],
  );
  return rows[0];
}

/**
 * Takes episode `id`'s claim over in place, as a peer's takeover would, without its holder
 * noticing: owner `thief`, fence + 1, in whichever shape holds it (the claim table's row, which the
 * database mirrors into the episode row; else the episode row alone).
 */
export async function stealClaim(db: Queryable, id: string, thief = 'thief'): Promise<void> {
  const { rowCount } = await db.query(
    `WITH in_table AS (
       UPDATE cyclium_work_claims SET owner_node = $2, fence = fence + 1
        WHERE dedupe_key = (SELECT coalesce(dedupe_key, 'episode:' || id)
                              FROM cyclium_episodes WHERE id = $1)
       RETURNING 1),
     in_row AS (
       UPDATE cyclium_episodes SET claim_owner = $2, claim_fence = claim_fence + 1
        WHERE id = $1 AND dedupe_key IS NULL
          AND NOT EXISTS (SELECT 1 FROM cyclium_work_claims WHERE dedupe_key = 'episode:' || id)
       RETURNING 1)
     SELECT 1 FROM in_table UNION ALL SELECT 1 FROM in_row`,
    [id, thief],
  );
  if (rowCount !== 1) throw new Error(`episode ${id} holds no claim to steal`);
}

/**
 * Lets episode `id`'s lease run out in the database while its holder still thinks it alive, in
 * whichever shape holds the claim.
 */
export async function lapseClaim(db: Queryable, id: string): Promise<void> {
  await db.query(
    `WITH in_table AS (
       UPDATE cyclium_work_claims SET lease_until = now() - interval '1 second'
        WHERE dedupe_key = (SELECT coalesce(dedupe_key, 'episode:' || id)
                              FROM cyclium_episodes WHERE id = $1)
       RETURNING 1)
     UPDATE cyclium_episodes SET claim_lease_until = now() - interval '1 second'
      WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM in_table)`,
    [id],
  );
}
