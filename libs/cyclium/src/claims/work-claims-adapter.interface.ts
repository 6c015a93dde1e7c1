/** A lease this node holds on a dedupe key. */
export interface ClaimGrant {
  /** Increases by one on every acquire and steal of the key: the generation this holder owns. */
  fence: number;
  /** Retries of this key since it was last completed (1 on a first claim or after `done`). */
  attempt: number;
  /** When the lease lapses, by the database clock. */
  leaseUntil: Date;
}

/** What an acquire got: the claim, or word that someone else holds it. */
export type AcquireResult =
  /** `stolenFrom` names the previous holder when this acquire took over a lapsed lease. */
  | { status: 'acquired'; claim: ClaimGrant; stolenFrom?: string }
  | { status: 'busy' }
  | { status: 'passthrough' };

/** What a `WorkClaimsAdapter.acquire` call asks for: a lease length and a work type. */
export interface AcquireOptions {
  leaseSeconds: number;
  workType?: string;
}

/** Whether a fenced write went through (`ok`) or the claim had moved on (`not_owner`). */
export type ClaimWriteResult = 'ok' | 'not_owner';

/** A claimed row whose lease has lapsed. */
export interface ExpiredClaim {
  dedupeKey: string;
  ownerNode: string;
  fence: number;
  leaseUntil: Date;
  workType: string | null;
}

/** One live claim of this node, as the renewer knows it. */
export interface HeldClaim {
  key: string;
  fence: number;
}

import type { SqlExecutor } from '../sql/sql-executor.js';

/**
 * What an adapter whose claims live in the caller's PostgreSQL database can offer: taking part in
 * the caller's transaction on `client`, so a claim commits (or rolls back) with the work it
 * guards, and a fenced write proves ownership in the same statement or transaction as the write.
 *
 * The statement contract:
 * - `acquire` has the adapter's `acquire` semantics, run on `client`.
 * - `proveOwnership` is the first statement of a fenced transaction: true while `owner` holds `key`
 *   at `fence` with state `claimed` and an unexpired lease (by the database clock), and it holds
 *   the claim row until that transaction ends (e.g. `SELECT … FOR SHARE`), so a takeover waits for
 *   the commit and then sees its outcome.
 * - `finish` completes (`failure` null) or fails the claim at `fence`, on `client`.
 * - `ownerCte` is the body of a CTE named `owner` with the same meaning as `proveOwnership`: one
 *   row while owned (held until the statement's transaction ends), none otherwise, reading `$1`
 *   key, `$2` owner, `$3` fence. The library writes fenced statements as
 *   `WITH owner AS (<ownerCte>) <write> … FROM owner`, its own parameters starting at `$4`.
 */
export interface InTransactionClaims {
  /** `acquire`, on `client` (see the statement contract above). */
  acquire(
    client: SqlExecutor,
    key: string,
    owner: string,
    options: AcquireOptions,
  ): Promise<AcquireResult>;
  /** True while `owner` holds `key` at `fence`; holds the row until the transaction ends. */
  proveOwnership(client: SqlExecutor, key: string, owner: string, fence: number): Promise<boolean>;
  /** Completes (`failure` null) or fails the claim at `fence`, on `client`. */
  finish(
    client: SqlExecutor,
    key: string,
    owner: string,
    fence: number,
    failure: string | null,
  ): Promise<ClaimWriteResult>;
  /** The body of the CTE `owner` (see the statement contract above). */
  readonly ownerCte: string;
  /**
   * The same three, as CTEs the library composes into one statement with its own writes (see
   * ClaimFragments).
   */
  readonly fragments: ClaimFragments;
}

/**
 * SQL text for composing claims into a larger statement. Every `refs` value is an SQL expression
 * (usually a positional parameter) to use as is; `when` is a boolean expression gating the write.
 * The library calls each one detached from the object (`this` is undefined): write them as arrow
 * functions or functions that do not read `this`.
 * - `owner(refs)`: a SELECT with one row while `owner` holds `key` at `fence` (state `claimed`,
 *   lease unexpired), holding the claim row until the statement's transaction ends.
 * - `acquire(refs)`: `[name, body]` CTEs, the last one named `claim`, with one row (`fence`,
 *   `attempt`, `lease_until`, `stolen_from`) when the claim was taken, none when it is busy; with
 *   `acquire`'s semantics (insert, or take over a finished row or a lapsed lease as read).
 * - `finish(refs)`: an UPDATE … RETURNING 1 that completes (`failure` NULL) or fails the claim at
 *   `fence`.
 * - `ownerMany(refs)` (optional): a SELECT of the rows of the CTE `input` (columns `key`, `owner`,
 *   `fence` among others) whose owner holds the key at that fence, holding those claim rows until
 *   the transaction ends and locking them in key order, so that two statements that each lock
 *   several claims cannot deadlock. Without it, fenced writes are never batched.
 * - `acquireMany(refs)` (optional): `acquire` for every row of the CTE `input` (column `key`, keys
 *   distinct), as `[name, body]` CTEs, the last one named `claim`, with one row (`key`, `fence`,
 *   `attempt`, `lease_until`, `stolen_from`) per claim taken; a key without a row is busy. Rows are
 *   written and taken over in key order. Without it, begins are never batched.
 * - `fresh` (in `acquire`'s and `acquireMany`'s refs, optional): true when no claim can exist yet
 *   for the keys (the keys of episodes this statement inserts with new ids), so the fragment may
 *   insert without looking for a row to take over; an adapter may ignore it.
 * - `inRow` (in `acquire`'s and `acquireMany`'s refs, optional, passed only with `episodeRows`):
 *   an SQL boolean (in `acquireMany`, over the `input` row `i`) that is true when the episode row
 *   this statement inserts for the key took the key's first claim itself, should the claim table
 *   hold no row for the key as this statement sees it. Such a claim is reported (fence 1, attempt
 *   1, the lease from `now()`), not written again.
 * - `finishMany(refs)` (optional, with `ownerMany`): an UPDATE … RETURNING 1 that completes or
 *   fails, for every row of the CTE `input` (columns `key`, `owner`, `fence`, `failure`), the claim
 *   at that fence (`failure` NULL completes). Without it, terminal writes are never batched.
 * - `finished(refs)` (optional): a SELECT with one row when `owner` finished (completed or failed)
 *   `key` at `fence`: how a terminal write whose reply was lost is recognised as committed. Without
 *   it, the episode row alone decides (its status, and this node as its owner).
 * - `finishHeld(refs)` (optional): `finish`, but only while `owner` holds `key` at `fence` as
 *   `owner` proves it (state `claimed`, lease unexpired) and `when` holds: an UPDATE … RETURNING 1
 *   that is the ownership proof and the finish in one write, its row lock holding the claim until
 *   the transaction ends as `owner`'s does. A lone end uses it instead of `owner` and `finish`,
 *   which lock the row and then write it again; without it, it uses those two.
 * - `episodeRows` (optional): true only for the shipped adapter, whose claims of episodes live in
 *   each episode's own row (its `claim_*` columns): a new episode's there alone, any other in
 *   cyclium_work_claims, which the database mirrors into the row. A begin of a new episode then
 *   writes its first claim into the row it inserts (the fragments' `fresh` acquire, or one with
 *   `inRow`, only reports it), and an end proves its claim on the row it ends and writes the
 *   finished state there.
 *   Leave it out in an adapter of your own.
 */
export interface ClaimFragments {
  /** A SELECT with one row while `owner` holds `key` at `fence` (see above). */
  owner(this: void, refs: { key: string; owner: string; fence: string }): string;
  /** The rows of the CTE `input` whose owner holds the key, locked in key order (see above). */
  ownerMany?(this: void, refs: { input: string }): string;
  /** `[name, body]` CTEs taking the claim, the last one named `claim` (see above). */
  acquire(
    this: void,
    refs: {
      key: string;
      owner: string;
      leaseSeconds: string;
      workType: string;
      when: string;
      fresh?: boolean;
      inRow?: string;
    },
  ): Array<[string, string]>;
  /** An UPDATE … RETURNING 1 that completes or fails the claim at `fence` (see above). */
  finish(
    this: void,
    refs: { key: string; owner: string; fence: string; failure: string; when: string },
  ): string;
  /** `acquire` for every row of the CTE `input` (see above). */
  acquireMany?(
    this: void,
    refs: {
      input: string;
      owner: string;
      leaseSeconds: string;
      fresh?: boolean;
      inRow?: string;
    },
  ): Array<[string, string]>;
  /** `finish` for every row of the CTE `input` (see above). */
  finishMany?(this: void, refs: { input: string }): string;
  /** A SELECT with one row when `owner` finished `key` at `fence` (see above). */
  finished?(this: void, refs: { key: string; owner: string; fence: string }): string;
  /** `finish` only while `owner` holds `key` at `fence` and `when` holds (see above). */
  finishHeld?(
    this: void,
    refs: { key: string; owner: string; fence: string; failure: string; when: string },
  ): string;
  /** The episode rows hold each claim too (see above). */
  readonly episodeRows?: boolean;
}

/**
 * The contract every claims adapter honours: leases on dedupe keys, with fences.
 * Pass an implementation as `workClaims` to replace the shipped PostgreSQL adapter.
 *
 * `fence`, where a write method takes one, narrows the match to that generation of the claim, so
 * a holder that lost its lease and got the key back (A → B → A) cannot complete the new lease
 * with the old fence.
 */
export interface WorkClaimsAdapter {
  /** Takes `key` for `owner` (a new row, a finished one, or a lapsed lease), or reports it busy. */
  acquire(key: string, owner: string, options: AcquireOptions): Promise<AcquireResult>;
  /** Extends the lease by `leaseSeconds` while `owner` still holds `key`. */
  renew(
    key: string,
    owner: string,
    leaseSeconds: number,
    fence?: number,
  ): Promise<ClaimWriteResult>;
  /** Marks the claim `done` while `owner` holds it. */
  complete(key: string, owner: string, fence?: number): Promise<ClaimWriteResult>;
  /** Marks the claim `failed` with `detail` while `owner` holds it. */
  fail(key: string, owner: string, detail: string, fence?: number): Promise<ClaimWriteResult>;
  /** Owner, fence, state `claimed` and an unexpired lease, all at once. */
  owns(key: string, owner: string, fence: number): Promise<boolean>;
  /** Up to `limit` claims still `claimed` whose lease has lapsed, oldest lease first. */
  reclaimExpired(limit: number): Promise<ExpiredClaim[]>;
  /**
   * Renews many claims of one owner at once and returns those still held. The node's renewer
   * calls it once per tick; without it, the renewer falls back to one `renew` per claim.
   */
  renewMany?(owner: string, claims: HeldClaim[], leaseSeconds: number): Promise<HeldClaim[]>;
  /**
   * Ends the leases of many claims of one owner at once, so other nodes can take them right away
   * (a draining node). Without it, the gate fails each claim in turn.
   */
  releaseMany?(owner: string, keys: string[]): Promise<number>;
  /**
   * Present when the claims live in the host's database and can join its transactions (see
   * InTransactionClaims). Without it, a fenced write asks `owns()` first, which cannot hold the
   * claim until the write commits: as strong as a separate store allows.
   */
  readonly inTransaction?: InTransactionClaims;
}
