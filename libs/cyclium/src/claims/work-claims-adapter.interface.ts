/** A lease this node holds on a dedupe key. */
export interface ClaimGrant {
  /** Increases by one on every acquire and steal of the key: the generation this holder owns. */
  fence: number;
  /** Retries of this key since it was last completed. */
  attempt: number;
  /** When the lease lapses, by the database clock. */
  leaseUntil: Date;
}

export type AcquireResult =
  | { status: 'acquired'; claim: ClaimGrant }
  | { status: 'busy' }
  | { status: 'passthrough' };

export interface AcquireOptions {
  leaseSeconds: number;
  workType?: string;
}

export type ClaimWriteResult = 'ok' | 'not_owner';

/** A claimed row whose lease has lapsed. */
export interface ExpiredClaim {
  dedupeKey: string;
  ownerNode: string;
  fence: number;
  leaseUntil: Date;
  workType: string | null;
}

/**
 * The contract every claims adapter honours: leases on dedupe keys, with fences.
 * Pass an implementation as `workClaims` to replace the shipped PostgreSQL adapter.
 */
export interface WorkClaimsAdapter {
  acquire(key: string, owner: string, options: AcquireOptions): Promise<AcquireResult>;
  renew(key: string, owner: string, leaseSeconds: number): Promise<ClaimWriteResult>;
  complete(key: string, owner: string): Promise<ClaimWriteResult>;
  fail(key: string, owner: string, detail: string): Promise<ClaimWriteResult>;
  owns(key: string, owner: string, fence: number): Promise<boolean>;
  reclaimExpired(limit: number): Promise<ExpiredClaim[]>;
}
