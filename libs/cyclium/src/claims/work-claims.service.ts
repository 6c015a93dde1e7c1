import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_CLAIMS_ADAPTER, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { SqlExecutor } from '../database/sql-executor.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { ClaimHold } from './claim-hold.js';
import { LeaseRenewer } from './lease-renewer.service.js';
import { PostgresClaims } from './postgres-claims.adapter.js';
import type {
  AcquireResult,
  ClaimGrant,
  ClaimWriteResult,
  ExpiredClaim,
  WorkClaimsAdapter,
} from './work-claims-adapter.interface.js';

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

  async acquire(key: string, owner = this.identity.name(), options: WorkClaimsAcquireOptions = {}): Promise<AcquireResult> {
    if (!this.adapter) return { status: 'passthrough' };
    const sentAt = performance.now();
    const result = await this.adapter.acquire(key, owner, {
      leaseSeconds: options.leaseSeconds ?? this.options.workClaimsLeaseSeconds,
      workType: options.workType,
    });
    const durationMs = performance.now() - sentAt;
    if (result.status === 'acquired') {
      this.sentAt.set(result.claim, sentAt);
      const event = result.stolenFrom === undefined ? 'work_claims.acquired' : 'work_claims.steal';
      this.telemetry.emit(event, { dedupeKey: key, fence: result.claim.fence, durationMs });
    } else if (result.status === 'busy') {
      this.telemetry.emit('work_claims.busy', { dedupeKey: key, fence: null, durationMs });
    }
    return result;
  }

  /**
   * Hands an acquired claim to this node's renewer and returns its hold (signal, `check()`,
   * `release()`). A passthrough result gives a hold that is never lost.
   */
  hold(key: string, result: AcquireResult): ClaimHold {
    if (result.status !== 'acquired') return this.renewer.track(key, null, performance.now());
    return this.renewer.track(key, result.claim.fence, this.sentAt.get(result.claim) ?? performance.now());
  }

  async renew(key: string, owner = this.identity.name(), leaseSeconds?: number, fence?: number): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    return this.adapter.renew(key, owner, leaseSeconds ?? this.options.workClaimsLeaseSeconds, fence);
  }

  async complete(key: string, owner = this.identity.name(), fence?: number): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    const started = performance.now();
    const result = await this.adapter.complete(key, owner, fence);
    if (result === 'ok') {
      this.telemetry.emit('work_claims.completed', { dedupeKey: key, fence: fence ?? null, durationMs: performance.now() - started });
    }
    return result;
  }

  async fail(key: string, owner = this.identity.name(), detail = '', fence?: number): Promise<ClaimWriteResult> {
    if (!this.adapter) return 'ok';
    const started = performance.now();
    const result = await this.adapter.fail(key, owner, detail, fence);
    if (result === 'ok') {
      this.telemetry.emit('work_claims.failed', { dedupeKey: key, fence: fence ?? null, durationMs: performance.now() - started });
    }
    return result;
  }

  async owns(key: string, owner: string, fence: number): Promise<boolean> {
    if (!this.adapter) return true;
    return this.adapter.owns(key, owner, fence);
  }

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
  async proveOwnership(client: SqlExecutor, key: string, owner: string, fence: number | null): Promise<boolean> {
    if (!this.adapter || fence === null) return true;
    if (this.adapter instanceof PostgresClaims) return this.adapter.proveOwnership(client, key, owner, fence);
    return this.adapter.owns(key, owner, fence);
  }

  /**
   * Completes the claim as part of the caller's fenced transaction on `client`, so the work and the
   * claim's completion commit together. A custom adapter completes through its own store.
   */
  async completeWithin(client: SqlExecutor, key: string, owner: string, fence: number | null): Promise<ClaimWriteResult> {
    if (!this.adapter || fence === null) return 'ok';
    const started = performance.now();
    const result =
      this.adapter instanceof PostgresClaims
        ? await this.adapter.completeWithin(client, key, owner, fence)
        : await this.adapter.complete(key, owner, fence);
    if (result === 'ok') {
      this.telemetry.emit('work_claims.completed', { dedupeKey: key, fence, durationMs: performance.now() - started });
    }
    return result;
  }
}
