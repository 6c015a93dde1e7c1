import type {
  AcquireOptions,
  AcquireResult,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  WorkClaimsAdapter,
} from './work-claims-adapter.interface.js';

interface FakeRow {
  state: 'claimed' | 'done' | 'failed';
  owner: string;
  leaseUntil: number;
  attempt: number;
  fence: number;
  workType: string | null;
  errorDetail: string | null;
}

/** Options of `FakeClaims`. */
export interface FakeClaimsOptions {
  /** The clock leases are measured against, in ms. Default `Date.now`. */
  now?: () => number;
}

/**
 * An in-memory claims adapter with the shipped adapter's contract (busy while held, not
 * re-entrant, fences increase on every acquire and steal, steals after expiry), for unit tests:
 * pass it as `workClaims`. `setBusy(key)` makes every acquire of a key answer busy, as if another
 * node held it; the injectable clock lets a test expire leases without waiting.
 */
export class FakeClaims implements WorkClaimsAdapter {
  private readonly rows = new Map<string, FakeRow>();
  private readonly forcedBusy = new Set<string>();
  private readonly now: () => number;

  constructor(options: FakeClaimsOptions = {}) {
    this.now = options.now ?? Date.now;
  }

  /** Makes every acquire of `key` answer busy until `clearBusy`, as if another node held it. */
  setBusy(key: string): void {
    this.forcedBusy.add(key);
  }

  /** Undoes `setBusy`. */
  clearBusy(key: string): void {
    this.forcedBusy.delete(key);
  }

  /** The stored state of a key, for assertions. */
  inspect(key: string): Readonly<FakeRow> | undefined {
    const row = this.rows.get(key);
    return row && { ...row };
  }

  async acquire(
    key: string,
    owner: string,
    { leaseSeconds, workType }: AcquireOptions,
  ): Promise<AcquireResult> {
    if (this.forcedBusy.has(key)) return { status: 'busy' };
    const now = this.now();
    const leaseUntil = now + leaseSeconds * 1000;
    const row = this.rows.get(key);
    if (!row) {
      const created: FakeRow = {
        state: 'claimed',
        owner,
        leaseUntil,
        attempt: 1,
        fence: 1,
        workType: workType ?? null,
        errorDetail: null,
      };
      this.rows.set(key, created);
      return granted(created);
    }
    const live = row.state === 'claimed' && row.leaseUntil >= now;
    if (live) return { status: 'busy' };
    const stolenFrom = row.state === 'claimed' ? row.owner : undefined;
    row.attempt = row.state === 'done' ? 1 : row.attempt + 1;
    Object.assign(row, {
      state: 'claimed',
      owner,
      leaseUntil,
      fence: row.fence + 1,
      errorDetail: null,
    });
    row.workType = workType ?? row.workType;
    return stolenFrom === undefined ? granted(row) : { ...granted(row), stolenFrom };
  }

  async renew(
    key: string,
    owner: string,
    leaseSeconds: number,
    fence?: number,
  ): Promise<ClaimWriteResult> {
    const row = this.liveRow(key, owner, fence);
    if (!row) return 'not_owner';
    row.leaseUntil = this.now() + leaseSeconds * 1000;
    return 'ok';
  }

  async renewMany(owner: string, claims: HeldClaim[], leaseSeconds: number): Promise<HeldClaim[]> {
    const kept: HeldClaim[] = [];
    for (const claim of claims) {
      if ((await this.renew(claim.key, owner, leaseSeconds, claim.fence)) === 'ok')
        kept.push(claim);
    }
    return kept;
  }

  async releaseMany(owner: string, keys: string[]): Promise<number> {
    let released = 0;
    for (const key of keys) {
      const row = this.liveRow(key, owner);
      if (!row) continue;
      row.leaseUntil = this.now() - 1;
      released++;
    }
    return released;
  }

  async complete(key: string, owner: string, fence?: number): Promise<ClaimWriteResult> {
    return this.finish(key, owner, 'done', null, fence);
  }

  async fail(
    key: string,
    owner: string,
    detail: string,
    fence?: number,
  ): Promise<ClaimWriteResult> {
    return this.finish(key, owner, 'failed', detail, fence);
  }

  async owns(key: string, owner: string, fence: number): Promise<boolean> {
    return this.liveRow(key, owner, fence) !== undefined;
  }

  async reclaimExpired(limit: number): Promise<ExpiredClaim[]> {
    const now = this.now();
    return [...this.rows.entries()]
      .filter(([, row]) => row.state === 'claimed' && row.leaseUntil < now)
      .sort(([, a], [, b]) => a.leaseUntil - b.leaseUntil)
      .slice(0, limit)
      .map(([dedupeKey, row]) => ({
        dedupeKey,
        ownerNode: row.owner,
        fence: row.fence,
        leaseUntil: new Date(row.leaseUntil),
        workType: row.workType,
      }));
  }

  private liveRow(key: string, owner: string, fence?: number): FakeRow | undefined {
    const row = this.rows.get(key);
    if (!row || row.state !== 'claimed' || row.owner !== owner || row.leaseUntil <= this.now())
      return undefined;
    if (fence !== undefined && row.fence !== fence) return undefined;
    return row;
  }

  private finish(
    key: string,
    owner: string,
    state: 'done' | 'failed',
    detail: string | null,
    fence?: number,
  ): ClaimWriteResult {
    const row = this.rows.get(key);
    if (!row || row.state !== 'claimed' || row.owner !== owner) return 'not_owner';
    if (fence !== undefined && row.fence !== fence) return 'not_owner';
    Object.assign(row, { state, leaseUntil: this.now(), errorDetail: detail });
    return 'ok';
  }
}

function granted(row: FakeRow): Extract<AcquireResult, { status: 'acquired' }> {
  return {
    status: 'acquired',
    claim: { fence: row.fence, attempt: row.attempt, leaseUntil: new Date(row.leaseUntil) },
  };
}
