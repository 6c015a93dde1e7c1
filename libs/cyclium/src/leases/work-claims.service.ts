import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_CLAIMS_ADAPTER, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { QueryResult, QueryResultRow } from 'pg';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { ClaimHold } from '../claims/claim-hold.js';
import { LeaseRenewer } from './lease-renewer.service.js';
import type {
  AcquireResult,
  ClaimGrant,
  ClaimWriteResult,
  ExpiredClaim,
  WorkClaimsAdapter,
} from '../claims/work-claims-adapter.interface.js';
import {
  type ClaimsInStatement,
  type FencedStatement,
  OPEN_CLAIMS,
  OPEN_OWNER_CTE,
} from './claims-in-statement.js';

/** Options of `WorkClaims.acquire`. */
export interface WorkClaimsAcquireOptions {
  /** Default: `workClaimsLeaseSeconds`. */
  leaseSeconds?: number;
  workType?: string;
}

/**
 * The gate: the only thing the rest of the library calls for claims. With `workClaims: false`
 * every call is a passthrough that touches no database (`acquire` answers `passthrough`, `owns`
 * answers true).
 */
@Injectable()
export class WorkClaims {
  /** When each grant's acquire was sent (monotonic), to start its holder's local deadline. */
  private readonly sentAt = new WeakMap<ClaimGrant, number>();

  constructor(
    @Inject(CYCLIUM_CLAIMS_ADAPTER) private readonly adapter: WorkClaimsAdapter | null,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
    private readonly renewer: LeaseRenewer,
    private readonly telemetry: CycliumTelemetry,
    private readonly identity: NodeIdentity,
  ) {}

  /** False when claims are off and every call is a passthrough. */
  get enabled(): boolean {
    return this.adapter !== null;
  }

  /** The lease every claim of this node is taken for, in seconds. */
  get leaseSeconds(): number {
    return this.options.workClaimsLeaseSeconds;
  }

  /** How claims join the one-round-trip statements of an episode's life. */
  inStatement(): ClaimsInStatement {
    const joined = this.adapter?.inTransaction;
    return joined
      ? { joined: true, fragments: joined.fragments, shape: 'joined' }
      : this.openClaims();
  }

  /**
   * The fragments of claims outside the statement (checked and finished by the caller around it).
   */
  openClaims(): ClaimsInStatement {
    return OPEN_CLAIMS;
  }

  /**
   * Makes a grant from what an `acquire` fragment returned (one row when acquired, none when busy).
   */
  grantOf(
    row: {
      fence: string | null;
      attempt: number | null;
      lease_until: Date | null;
      stolen_from: string | null;
    },
    key: string,
    sentAt: number,
  ): AcquireResult {
    if (!this.adapter) return { status: 'passthrough' };
    if (row.fence === null) return this.answered(key, { status: 'busy' }, sentAt);
    const claim: ClaimGrant = {
      fence: Number(row.fence),
      attempt: row.attempt as number,
      leaseUntil: row.lease_until as Date,
    };
    return this.answered(
      key,
      row.stolen_from === null
        ? { status: 'acquired', claim }
        : { status: 'acquired', claim, stolenFrom: row.stolen_from },
      sentAt,
    );
  }

  /**
   * Remembers when an acquired grant was asked for (its holder's deadline starts there) and reports
   * the answer.
   */
  private answered(key: string, result: AcquireResult, sentAt: number): AcquireResult {
    if (result.status === 'acquired') this.sentAt.set(result.claim, sentAt);
    this.report(key, result, performance.now() - sentAt);
    return result;
  }

  private report(key: string, result: AcquireResult, durationMs: number): void {
    if (result.status === 'acquired') {
      const event = result.stolenFrom === undefined ? 'work_claims.acquired' : 'work_claims.steal';
      this.telemetry.emit(event, { dedupeKey: key, fence: result.claim.fence, durationMs });
    } else if (result.status === 'busy') {
      this.telemetry.emit('work_claims.busy', { dedupeKey: key, fence: null, durationMs });
    }
  }

  /** Telemetry for a claim a composed statement finished. */
  finished(key: string, fence: number | null, failed: boolean, startedAt: number): void {
    this.telemetry.emit(failed ? 'work_claims.failed' : 'work_claims.completed', {
      dedupeKey: key,
      fence,
      durationMs: performance.now() - startedAt,
    });
  }

  /** Takes `key` for `owner` (default: this node); passthrough when claims are off. */
  async acquire(
    key: string,
    owner = this.identity.name(),
    options: WorkClaimsAcquireOptions = {},
  ): Promise<AcquireResult> {
    return this.acquireVia(undefined, key, owner, options);
  }

  /**
   * Acquires inside the caller's transaction on `client` (with the shipped adapter), so the claim
   * and the caller's write commit or roll back together.
   */
  async acquireWithin(
    client: SqlExecutor,
    key: string,
    owner = this.identity.name(),
    options: WorkClaimsAcquireOptions = {},
  ): Promise<AcquireResult> {
    return this.acquireVia(client, key, owner, options);
  }

  /**
   * `acquireWithin` for a transaction that may still roll the claim back: the answer is reported
   * (telemetry) only when the caller calls `report`, once it knows the claim's write stayed.
   */
  async acquireWithinUnreported(
    client: SqlExecutor,
    key: string,
    owner = this.identity.name(),
    options: WorkClaimsAcquireOptions = {},
  ): Promise<{
    result: AcquireResult;
    /** Emits the acquire's telemetry; call it once the claim's write has committed. */
    report: () => void;
  }> {
    if (!this.adapter) return { result: { status: 'passthrough' }, report: () => undefined };
    const sentAt = performance.now();
    const result = await this.acquireVia(client, key, owner, options, false);
    const durationMs = performance.now() - sentAt;
    return { result, report: () => this.report(key, result, durationMs) };
  }

  private async acquireVia(
    client: SqlExecutor | undefined,
    key: string,
    owner: string,
    options: WorkClaimsAcquireOptions,
    report = true,
  ): Promise<AcquireResult> {
    if (!this.adapter) return { status: 'passthrough' };
    const sentAt = performance.now();
    const acquireOptions = {
      leaseSeconds: options.leaseSeconds ?? this.options.workClaimsLeaseSeconds,
      workType: options.workType,
    };
    const joined = client ? this.adapter.inTransaction : undefined;
    const result =
      joined && client
        ? await joined.acquire(client, key, owner, acquireOptions)
        : await this.adapter.acquire(key, owner, acquireOptions);
    if (report) return this.answered(key, result, sentAt);
    if (result.status === 'acquired') this.sentAt.set(result.claim, sentAt);
    return result;
  }

  /**
   * Hands an acquired claim to this node's renewer and returns its hold (signal, `check()`,
   * `release()`). A passthrough result gives a hold that is never lost.
   */
  hold(key: string, result: AcquireResult): ClaimHold {
    if (result.status !== 'acquired') return this.renewer.track(key, null, performance.now());
    return this.renewer.track(
      key,
      result.claim.fence,
      this.sentAt.get(result.claim) ?? performance.now(),
    );
  }

  /** Extends the lease while `owner` still holds `key` (at `fence`, when given). */
  async renew(
    key: string,
    owner = this.identity.name(),
    leaseSeconds?: number,
    fence?: number,
  ): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    return this.adapter.renew(
      key,
      owner,
      leaseSeconds ?? this.options.workClaimsLeaseSeconds,
      fence,
    );
  }

  /** Marks the claim `done` while `owner` holds it. */
  async complete(
    key: string,
    owner = this.identity.name(),
    fence?: number,
  ): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    const started = performance.now();
    const result = await this.adapter.complete(key, owner, fence);
    if (result === 'ok') this.finished(key, fence ?? null, false, started);
    return result;
  }

  /** Marks the claim `failed` while `owner` holds it. */
  async fail(
    key: string,
    owner = this.identity.name(),
    detail = '',
    fence?: number,
  ): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    const started = performance.now();
    const result = await this.adapter.fail(key, owner, detail, fence);
    if (result === 'ok') this.finished(key, fence ?? null, true, started);
    return result;
  }

  /** Ends this owner's leases on `keys` at once (one statement with the shipped adapter). */
  async releaseAll(keys: string[], owner = this.identity.name()): Promise<number> {
    if (!this.adapter || keys.length === 0) return 0;
    if (this.adapter.releaseMany) return this.adapter.releaseMany(owner, keys);
    const adapter = this.adapter;
    const results = await Promise.all(keys.map((key) => adapter.fail(key, owner, 'released')));
    return results.filter((r) => r === 'ok').length;
  }

  /** Whether `owner` holds `key` at `fence` with a live lease; true when claims are off. */
  async owns(key: string, owner: string, fence: number): Promise<boolean> {
    if (!this.adapter) return true;
    return this.adapter.owns(key, owner, fence);
  }

  /** Claims still `claimed` whose lease has lapsed (at most `limit`). */
  async reclaimExpired(limit = 100): Promise<ExpiredClaim[]> {
    if (!this.adapter) return [];
    return this.adapter.reclaimExpired(limit);
  }

  /**
   * The first statement of a fenced write, inside the caller's transaction on `client`: true when
   * `owner` still holds `key` at `fence`. With the shipped adapter the claim row stays held until
   * the transaction ends, so nobody can take the claim between this check and the commit. A custom
   * adapter is asked `owns()`, which cannot hold anything: that is as strong as its store allows.
   * With claims off (or `fence` null) it is always true.
   */
  async proveOwnership(
    client: SqlExecutor,
    key: string,
    owner: string,
    fence: number | null,
  ): Promise<boolean> {
    if (!this.adapter || fence === null) return true;
    const joined = this.adapter.inTransaction;
    return joined
      ? joined.proveOwnership(client, key, owner, fence)
      : this.adapter.owns(key, owner, fence);
  }

  /**
   * Runs one fenced statement: `body` is the rest of a `WITH` query that may read the CTE `owner`
   * (one row while `owner` holds `key` at `fence`, none otherwise), e.g.
   * `INSERT INTO t SELECT $4, $5 FROM owner RETURNING 1`. Parameters $1..$3 are the ownership
   * check's; the caller's `values` start at $4. With the shipped adapter the check and the write
   * are one statement that holds the claim row until it commits; with claims off `owner` always
   * has its row; a custom adapter is asked `owns()` first.
   */
  async fencedStatement<R extends QueryResultRow = QueryResultRow>(
    sql: SqlExecutor,
    claim: { key: string; owner: string; fence: number | null },
    statement: FencedStatement,
    values: unknown[],
  ): Promise<QueryResult<R>> {
    const params = [claim.key, claim.owner, claim.fence, ...values];
    const joined = claim.fence === null ? undefined : this.adapter?.inTransaction;
    // A custom adapter's store is not this database: ask it, then write (as strong as it allows).
    if (
      !joined &&
      this.adapter &&
      claim.fence !== null &&
      !(await this.adapter.owns(claim.key, claim.owner, claim.fence))
    ) {
      return { rows: [], rowCount: 0, command: 'SELECT', oid: 0, fields: [] };
    }
    const owner = joined ? joined.ownerCte : OPEN_OWNER_CTE;
    return sql.query<R>({
      name: `cyclium_${statement.name}_${joined ? 'fenced' : 'open'}`,
      text: `WITH owner AS (${owner}) ${statement.body}`,
      values: params,
    });
  }

  /**
   * Completes the claim as part of the caller's fenced transaction on `client`, so the work and the
   * claim's completion commit together. A custom adapter completes through its own store.
   */
  async completeWithin(
    client: SqlExecutor,
    key: string,
    owner: string,
    fence: number | null,
  ): Promise<ClaimWriteResult> {
    return this.finishWithin(client, key, owner, fence, null);
  }

  /** Fails the claim as part of the caller's fenced transaction on `client`. */
  async failWithin(
    client: SqlExecutor,
    key: string,
    owner: string,
    fence: number | null,
    detail: string,
  ): Promise<ClaimWriteResult> {
    return this.finishWithin(client, key, owner, fence, detail);
  }

  private async finishWithin(
    client: SqlExecutor,
    key: string,
    owner: string,
    fence: number | null,
    failure: string | null,
  ): Promise<ClaimWriteResult> {
    if (!this.adapter || fence === null) return 'ok';
    const started = performance.now();
    const adapter = this.adapter;
    const joined = adapter.inTransaction;
    let result: ClaimWriteResult;
    if (joined) result = await joined.finish(client, key, owner, fence, failure);
    else
      result =
        failure === null
          ? await adapter.complete(key, owner, fence)
          : await adapter.fail(key, owner, failure, fence);
    if (result === 'ok') this.finished(key, fence, failure !== null, started);
    return result;
  }
}
