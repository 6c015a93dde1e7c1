import type { SqlExecutor } from '../sql/sql-executor.js';
import { POSTGRES_CLAIM_FRAGMENTS } from './postgres-claim-fragments.js';
import {
  type ClaimRow,
  FINISH,
  INSERT_OR_READ,
  OWNER_CTE,
  OWNS,
  PROVE_OWNERSHIP,
  RECLAIM_EXPIRED,
  RELEASE_MANY,
  RENEW,
  RENEW_MANY,
  TAKE_OVER,
} from './postgres-claim-statements.js';
import type {
  AcquireOptions,
  AcquireResult,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  InTransactionClaims,
  WorkClaimsAdapter,
} from './work-claims-adapter.interface.js';

/** SQLSTATE 40001. */
const SERIALIZATION_FAILURE = '40001';

/**
 * The shipped adapter: race-free at READ COMMITTED without explicit row locks. A first claim is
 * one INSERT that loses on the primary key; every takeover is one conditional UPDATE.
 */
export class PostgresClaims implements WorkClaimsAdapter {
  /** Claims and the host's work share one database, so they can share its transactions. */
  readonly inTransaction: InTransactionClaims = {
    acquire: (client, key, owner, options) => this.acquireOn(client, key, owner, options),
    proveOwnership: async (client, key, owner, fence) =>
      (await client.query(PROVE_OWNERSHIP([key, owner, fence]))).rowCount === 1,
    finish: async (client, key, owner, fence, failure) =>
      outcome(
        await client.query(
          FINISH([key, owner, failure === null ? 'done' : 'failed', failure, fence]),
        ),
      ),
    ownerCte: OWNER_CTE,
    fragments: POSTGRES_CLAIM_FRAGMENTS,
  };

  /**
   * @param sql where claims are acquired and finished (the host's pool)
   * @param renewals where renewals run: a connection episode work cannot starve
   */
  constructor(
    private readonly sql: SqlExecutor,
    private readonly renewals: SqlExecutor = sql,
  ) {}

  /**
   * A takeover that raced a claim taken or renewed in its episode row meanwhile fails with the
   * table trigger's serialization failure, having written nothing: busy, as when it loses to a
   * claim-table row. (Inside the caller's transaction it stays an error: that transaction is over.)
   */
  async acquire(key: string, owner: string, options: AcquireOptions): Promise<AcquireResult> {
    try {
      return await this.acquireOn(this.sql, key, owner, options);
    } catch (error) {
      if ((error as { code?: unknown }).code === SERIALIZATION_FAILURE) return { status: 'busy' };
      throw error;
    }
  }

  private async acquireOn(
    via: SqlExecutor,
    key: string,
    owner: string,
    { leaseSeconds, workType }: AcquireOptions,
  ): Promise<AcquireResult> {
    const { rows } = await via.query<ClaimRow>(
      INSERT_OR_READ([key, owner, leaseSeconds, workType ?? null]),
    );
    const row = rows[0];
    if (!row) return { status: 'busy' };
    if (row.inserted)
      return row.stolen_from ? { ...acquired(row), stolenFrom: row.stolen_from } : acquired(row);
    // Not re-entrant: a live lease is busy for everyone, its holder included.
    if (row.state === 'claimed' && !row.expired) return { status: 'busy' };

    const taken = await via.query<ClaimRow>(
      TAKE_OVER([key, owner, leaseSeconds, workType ?? null, row.fence, row.state]),
    );
    if (taken.rowCount !== 1) return { status: 'busy' };
    return row.state === 'claimed'
      ? { ...acquired(taken.rows[0]), stolenFrom: row.owner_node }
      : acquired(taken.rows[0]);
  }

  async renew(
    key: string,
    owner: string,
    leaseSeconds: number,
    fence?: number,
  ): Promise<ClaimWriteResult> {
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

  async fail(
    key: string,
    owner: string,
    detail: string,
    fence?: number,
  ): Promise<ClaimWriteResult> {
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

function acquired(
  row: Pick<ClaimRow, 'fence' | 'attempt' | 'lease_until'>,
): Extract<AcquireResult, { status: 'acquired' }> {
  return {
    status: 'acquired',
    claim: { fence: Number(row.fence), attempt: row.attempt, leaseUntil: row.lease_until },
  };
}

function outcome(result: { rowCount: number | null }): ClaimWriteResult {
  return result.rowCount === 1 ? 'ok' : 'not_owner';
}
