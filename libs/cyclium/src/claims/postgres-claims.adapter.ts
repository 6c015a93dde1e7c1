import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type {
  AcquireOptions,
  AcquireResult,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  InTransactionClaims,
  WorkClaimsAdapter,
} from './work-claims-adapter.interface.js';

interface ClaimRow {
  inserted: boolean;
  state: 'claimed' | 'done' | 'failed';
  owner_node: string;
  fence: string;
  attempt: number;
  lease_until: Date;
  expired: boolean;
}

/**
 * One statement for the common cases: insert a first claim, or, when the key exists, read it.
 * The lease runs from this statement (clock_timestamp()), not from its transaction's start
 * (now()): inside a longer transaction the holder's local deadline counts from when this statement
 * was sent, and it must not outlast the lease the database granted (rule 1).
 * The read uses this statement's snapshot, so a row another node inserted and committed while we
 * waited on its conflict is invisible here; no row at all therefore means a claim younger than us:
 * busy, which is the right answer.
 */
const INSERT_OR_READ = prepared(
  'claims_insert_or_read',
  `
  WITH inserted AS (
    INSERT INTO cyclium_work_claims
      (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence, work_type)
    VALUES ($1, 'claimed', $2, clock_timestamp() + make_interval(secs => $3), now(), now(), 1, 1, $4)
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING true AS inserted, state, owner_node, fence, attempt, lease_until, false AS expired
  )
  SELECT * FROM inserted
  UNION ALL
  SELECT false, state, owner_node, fence, attempt, lease_until, lease_until < now()
    FROM cyclium_work_claims
   WHERE dedupe_key = $1 AND NOT EXISTS (SELECT 1 FROM inserted)`,
);

/**
 * Takeover of a finished row or a lapsed lease, conditioned on the state we read: the fence is the
 * row's version (every acquire and steal bumps it), and the lapse is re-checked against the row as
 * it is when the UPDATE reaches it, so of any number of concurrent takers exactly one matches.
 */
const TAKE_OVER = prepared(
  'claims_take_over',
  `
  UPDATE cyclium_work_claims
     SET state = 'claimed', owner_node = $2, lease_until = clock_timestamp() + make_interval(secs => $3),
         claimed_at = now(), last_heartbeat_at = now(), finished_at = NULL, error_detail = NULL,
         attempt = CASE WHEN state = 'done' THEN 1 ELSE attempt + 1 END,
         fence = fence + 1, work_type = COALESCE($4, work_type)
   WHERE dedupe_key = $1 AND fence = $5 AND state = $6
     AND (state <> 'claimed' OR lease_until < now())
  RETURNING fence, attempt, lease_until`,
);

const RENEW = prepared(
  'claims_renew',
  `
  UPDATE cyclium_work_claims
     SET lease_until = now() + make_interval(secs => $3), last_heartbeat_at = now()
   WHERE dedupe_key = $1 AND owner_node = $2 AND state = 'claimed' AND lease_until > now()
     AND ($4::bigint IS NULL OR fence = $4)`,
);

/**
 * Every live claim of one node in one statement: the heartbeat's whole cost per tick. Statements
 * that lock several claim rows (this one, the release and batched step writes) lock them in key
 * order, so they wait for each other instead of deadlocking.
 */
const RENEW_MANY = prepared(
  'claims_renew_many',
  `
  WITH locked AS (
    SELECT c.dedupe_key FROM cyclium_work_claims c
      JOIN unnest($3::text[], $4::bigint[]) AS held (dedupe_key, fence) ON c.dedupe_key = held.dedupe_key AND c.fence = held.fence
     WHERE c.owner_node = $1 AND c.state = 'claimed' AND c.lease_until > now()
     ORDER BY c.dedupe_key
       FOR UPDATE OF c)
  UPDATE cyclium_work_claims AS c
     SET lease_until = now() + make_interval(secs => $2), last_heartbeat_at = now()
    FROM locked
   WHERE c.dedupe_key = locked.dedupe_key
  RETURNING c.dedupe_key, c.fence`,
);

/** Lapses the leases (state stays `claimed`): the next taker steals in place, with fence + 1. In key order, as RENEW_MANY. */
const RELEASE_MANY = prepared(
  'claims_release_many',
  `
  WITH locked AS (
    SELECT dedupe_key FROM cyclium_work_claims
     WHERE owner_node = $1 AND state = 'claimed' AND dedupe_key = ANY($2::text[]) AND lease_until > now()
     ORDER BY dedupe_key
       FOR UPDATE)
  UPDATE cyclium_work_claims AS c SET lease_until = now()
    FROM locked
   WHERE c.dedupe_key = locked.dedupe_key`,
);

const FINISH = prepared(
  'claims_finish',
  `
  UPDATE cyclium_work_claims
     SET state = $3, finished_at = now(), error_detail = $4
   WHERE dedupe_key = $1 AND owner_node = $2 AND state = 'claimed'
     AND ($5::bigint IS NULL OR fence = $5)`,
);

const OWNS_TEXT = `
  SELECT 1 FROM cyclium_work_claims
   WHERE dedupe_key = $1 AND owner_node = $2 AND fence = $3 AND state = 'claimed' AND lease_until > now()`;
const OWNS = prepared('claims_owns', OWNS_TEXT);

/**
 * Holds the claim row until the surrounding transaction ends, so a thief's takeover waits for our
 * commit and then sees the outcome; used as the first statement of every fenced write.
 */
const PROVE_OWNERSHIP = prepared('claims_prove_ownership', `${OWNS_TEXT} FOR SHARE`);

/**
 * The ownership proof as the body of a CTE named `owner` (one row while owned, held until the
 * statement commits), so a fenced write can be a single statement.
 */
const OWNER_CTE = `${OWNS_TEXT} FOR SHARE`;

const RECLAIM_EXPIRED = prepared(
  'claims_reclaim_expired',
  `
  SELECT dedupe_key, owner_node, fence, lease_until, work_type FROM cyclium_work_claims
   WHERE state = 'claimed' AND lease_until < now()
   ORDER BY lease_until
   LIMIT $1`,
);

/**
 * The shipped adapter: race-free at READ COMMITTED without explicit row locks. A first claim is
 * one INSERT that loses on the primary key; every takeover is one conditional UPDATE.
 */
export class PostgresClaims implements WorkClaimsAdapter {
  /**
   * @param sql where claims are acquired and finished (the host's pool)
   * @param renewals where renewals run: a connection episode work cannot starve
   */
  /** Claims and the host's work share one database, so they can share its transactions. */
  readonly inTransaction: InTransactionClaims = {
    acquire: (client, key, owner, options) => this.acquireOn(client, key, owner, options),
    proveOwnership: async (client, key, owner, fence) => (await client.query(PROVE_OWNERSHIP([key, owner, fence]))).rowCount === 1,
    finish: async (client, key, owner, fence, failure) =>
      outcome(await client.query(FINISH([key, owner, failure === null ? 'done' : 'failed', failure, fence]))),
    ownerCte: OWNER_CTE,
    fragments: {
      owner: ({ key, owner, fence }) => `
        SELECT 1 FROM cyclium_work_claims
         WHERE dedupe_key = ${key} AND owner_node = ${owner} AND fence = ${fence} AND state = 'claimed' AND lease_until > now()
        FOR SHARE`,
      ownerMany: ({ input }) => `
        SELECT i.* FROM ${input} i
          JOIN cyclium_work_claims c ON c.dedupe_key = i.key AND c.owner_node = i.owner AND c.fence = i.fence
         WHERE c.state = 'claimed' AND c.lease_until > now()
         ORDER BY c.dedupe_key
           FOR SHARE OF c`,
      // The row as this statement sees it decides, exactly as in INSERT_OR_READ + TAKE_OVER: no row
      // means insert (a concurrent first claim makes it busy); a row is taken over only in the state read.
      acquire: ({ key, owner, leaseSeconds, workType, when }) => [
        ['claim_seen', `SELECT state, owner_node, fence FROM cyclium_work_claims WHERE dedupe_key = ${key}`],
        [
          'claim_new',
          `INSERT INTO cyclium_work_claims
             (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence, work_type)
           SELECT ${key}, 'claimed', ${owner}, now() + make_interval(secs => ${leaseSeconds}), now(), now(), 1, 1, ${workType}
            WHERE (${when}) AND NOT EXISTS (SELECT 1 FROM claim_seen)
           ON CONFLICT (dedupe_key) DO NOTHING
           RETURNING fence, attempt, lease_until, NULL::text AS stolen_from`,
        ],
        [
          'claim_taken',
          `UPDATE cyclium_work_claims c
              SET state = 'claimed', owner_node = ${owner}, lease_until = now() + make_interval(secs => ${leaseSeconds}),
                  claimed_at = now(), last_heartbeat_at = now(), finished_at = NULL, error_detail = NULL,
                  attempt = CASE WHEN c.state = 'done' THEN 1 ELSE c.attempt + 1 END,
                  fence = c.fence + 1, work_type = COALESCE(${workType}, c.work_type)
             FROM claim_seen seen
            WHERE (${when}) AND c.dedupe_key = ${key} AND c.fence = seen.fence AND c.state = seen.state
              AND (c.state <> 'claimed' OR c.lease_until < now())
           RETURNING c.fence, c.attempt, c.lease_until, CASE WHEN seen.state = 'claimed' THEN seen.owner_node END AS stolen_from`,
        ],
        ['claim', `SELECT * FROM claim_new UNION ALL SELECT * FROM claim_taken`],
      ],
      finish: ({ key, owner, fence, failure, when }) => `
        UPDATE cyclium_work_claims
           SET state = CASE WHEN ${failure}::text IS NULL THEN 'done' ELSE 'failed' END, finished_at = now(), error_detail = ${failure}
         WHERE dedupe_key = ${key} AND owner_node = ${owner} AND state = 'claimed' AND fence = ${fence} AND (${when})
        RETURNING 1`,
      // acquire for many keys, each decided on the row as this statement sees it; takeovers lock in
      // key order (a lock re-reads the row, so a taker that lost the race finds no match: busy).
      acquireMany: ({ input, owner, leaseSeconds }) => [
        ['claim_seen', `SELECT c.dedupe_key, c.state, c.owner_node, c.fence FROM cyclium_work_claims c JOIN ${input} i ON i.key = c.dedupe_key`],
        [
          'claim_new',
          `INSERT INTO cyclium_work_claims
             (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence)
           SELECT i.key, 'claimed', ${owner}, now() + make_interval(secs => ${leaseSeconds}), now(), now(), 1, 1
             FROM ${input} i
            WHERE NOT EXISTS (SELECT 1 FROM claim_seen seen WHERE seen.dedupe_key = i.key)
            ORDER BY i.key
           ON CONFLICT (dedupe_key) DO NOTHING
           RETURNING dedupe_key AS key, fence, attempt, lease_until, NULL::text AS stolen_from`,
        ],
        [
          'claim_lapsed',
          `SELECT c.dedupe_key, seen.state AS seen_state, seen.owner_node AS seen_owner FROM cyclium_work_claims c
             JOIN claim_seen seen ON seen.dedupe_key = c.dedupe_key AND c.fence = seen.fence AND c.state = seen.state
            WHERE c.state <> 'claimed' OR c.lease_until < now()
            ORDER BY c.dedupe_key
              FOR UPDATE OF c`,
        ],
        [
          'claim_taken',
          `UPDATE cyclium_work_claims c
              SET state = 'claimed', owner_node = ${owner}, lease_until = now() + make_interval(secs => ${leaseSeconds}),
                  claimed_at = now(), last_heartbeat_at = now(), finished_at = NULL, error_detail = NULL,
                  attempt = CASE WHEN c.state = 'done' THEN 1 ELSE c.attempt + 1 END, fence = c.fence + 1
             FROM claim_lapsed l
            WHERE c.dedupe_key = l.dedupe_key
           RETURNING c.dedupe_key AS key, c.fence, c.attempt, c.lease_until, CASE WHEN l.seen_state = 'claimed' THEN l.seen_owner END AS stolen_from`,
        ],
        ['claim', `SELECT * FROM claim_new UNION ALL SELECT * FROM claim_taken`],
      ],
      finishMany: ({ input }) => `
        UPDATE cyclium_work_claims c
           SET state = CASE WHEN i.failure IS NULL THEN 'done' ELSE 'failed' END, finished_at = now(), error_detail = i.failure
          FROM ${input} i
         WHERE c.dedupe_key = i.key AND c.owner_node = i.owner AND c.state = 'claimed' AND c.fence = i.fence
        RETURNING 1`,
      finished: ({ key, owner, fence }) => `
        SELECT 1 FROM cyclium_work_claims
         WHERE dedupe_key = ${key} AND owner_node = ${owner} AND fence = ${fence} AND state IN ('done', 'failed')`,
    },
  };

  constructor(
    private readonly sql: SqlExecutor,
    private readonly renewals: SqlExecutor = sql,
  ) {}

  acquire(key: string, owner: string, options: AcquireOptions): Promise<AcquireResult> {
    return this.acquireOn(this.sql, key, owner, options);
  }

  private async acquireOn(via: SqlExecutor, key: string, owner: string, { leaseSeconds, workType }: AcquireOptions): Promise<AcquireResult> {
    const { rows } = await via.query<ClaimRow>(INSERT_OR_READ([key, owner, leaseSeconds, workType ?? null]));
    const row = rows[0];
    if (!row) return { status: 'busy' };
    if (row.inserted) return acquired(row);
    // Not re-entrant: a live lease is busy for everyone, its holder included.
    if (row.state === 'claimed' && !row.expired) return { status: 'busy' };

    const taken = await via.query<ClaimRow>(TAKE_OVER([key, owner, leaseSeconds, workType ?? null, row.fence, row.state]));
    if (taken.rowCount !== 1) return { status: 'busy' };
    return row.state === 'claimed' ? { ...acquired(taken.rows[0]), stolenFrom: row.owner_node } : acquired(taken.rows[0]);
  }

  async renew(key: string, owner: string, leaseSeconds: number, fence?: number): Promise<ClaimWriteResult> {
    return outcome(await this.renewals.query(RENEW([key, owner, leaseSeconds, fence ?? null])));
  }

  async renewMany(owner: string, claims: HeldClaim[], leaseSeconds: number): Promise<HeldClaim[]> {
    if (claims.length === 0) return [];
    const { rows } = await this.renewals.query<{ dedupe_key: string; fence: string }>(
      RENEW_MANY([owner, leaseSeconds, claims.map((c) => c.key), claims.map((c) => c.fence)]),
    );
    return rows.map((r) => ({ key: r.dedupe_key, fence: Number(r.fence) }));
  }

  async releaseMany(owner: string, keys: string[]): Promise<number> {
    if (keys.length === 0) return 0;
    return (await this.sql.query(RELEASE_MANY([owner, keys]))).rowCount ?? 0;
  }

  async complete(key: string, owner: string, fence?: number): Promise<ClaimWriteResult> {
    return outcome(await this.sql.query(FINISH([key, owner, 'done', null, fence ?? null])));
  }

  async fail(key: string, owner: string, detail: string, fence?: number): Promise<ClaimWriteResult> {
    return outcome(await this.sql.query(FINISH([key, owner, 'failed', detail, fence ?? null])));
  }

  async owns(key: string, owner: string, fence: number): Promise<boolean> {
    return (await this.sql.query(OWNS([key, owner, fence]))).rowCount === 1;
  }

  async reclaimExpired(limit: number): Promise<ExpiredClaim[]> {
    const { rows } = await this.sql.query<{
      dedupe_key: string;
      owner_node: string;
      fence: string;
      lease_until: Date;
      work_type: string | null;
    }>(RECLAIM_EXPIRED([limit]));
    return rows.map((r) => ({
      dedupeKey: r.dedupe_key,
      ownerNode: r.owner_node,
      fence: Number(r.fence),
      leaseUntil: r.lease_until,
      workType: r.work_type,
    }));
  }
}

function acquired(row: Pick<ClaimRow, 'fence' | 'attempt' | 'lease_until'>): Extract<AcquireResult, { status: 'acquired' }> {
  return { status: 'acquired', claim: { fence: Number(row.fence), attempt: row.attempt, leaseUntil: row.lease_until } };
}

function outcome(result: { rowCount: number | null }): ClaimWriteResult {
  return result.rowCount === 1 ? 'ok' : 'not_owner';
}
