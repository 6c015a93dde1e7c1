import { OWN_CLAIM_IN_ROW, ownedInRow, ownedInRows } from './row-claim-sql.js';
import { claimKeyOfRow } from './claim-keys.js';
import { KEYED_CLAIMED } from '../sql/keyed-status.js';

/**
 * The one spelling of each claim statement shape. The single statements, the in-transaction
 * fragments and the batched fragments all render their SQL here with their own parameter refs
 * (positional parameters, CTE columns), so a fence rule is written once and cannot drift between
 * forms. Every ref is an SQL expression used as is; the claim row is always aliased `c`. A claim
 * lives in cyclium_work_claims or, for a new episode, in its own row (row-claim-sql.ts): proofs
 * and reads here look in both.
 */

/** Which generation of a claim a statement means. */
export interface ClaimRefs {
  key: string;
  owner: string;
  fence: string;
}

/**
 * Where a new or taken lease runs from: `clock_timestamp()` when the caller's local deadline counts
 * from this statement, `now()` when it counts from the transaction's start (rule 1).
 */
export type LeaseClock = 'clock_timestamp()' | 'now()';

interface LeaseRefs {
  owner: string;
  leaseSeconds: string;
  leaseFrom: LeaseClock;
  /** Omitted: the statement leaves `work_type` alone (the batched begin has none). */
  workType?: string;
}

/**
 * Ownership: the row of a claim `owner` holds on `key` at `fence`, state `claimed`, its lease
 * unexpired by the database clock. A fence ref of `coalesce($n::bigint, c.fence)` matches any
 * generation when the parameter is NULL (`fence` is NOT NULL).
 */
export function heldClaim({ key, owner, fence }: ClaimRefs): string {
  return (
    `c.dedupe_key = ${key} AND c.owner_node = ${owner} AND c.fence = ${fence} AND ` +
    `c.state = ${KEYED_CLAIMED} AND c.lease_until > now()`
  );
}

/**
 * The ownership proof: one row while owned, in the claim table or in the episode row that holds the
 * claim alone (never both: claimInRow). Locked (`FOR SHARE`), it holds the row that holds the claim
 * until the statement's transaction ends, so a thief's takeover waits for our commit and then sees
 * the outcome (a takeover of a claim held in its row inserts a claim-table row, whose mirror into
 * the episode row waits).
 */
export function ownedClaim(refs: ClaimRefs, lock: boolean): string {
  const share = lock ? ' FOR SHARE' : '';
  return `
    SELECT 1 FROM (SELECT 1 FROM cyclium_work_claims c WHERE ${heldClaim(refs)}${share}) t
    UNION ALL
    SELECT 1 FROM (${ownedInRow(refs, lock)}) r`;
}

/**
 * The ownership proof for every row of `input` (columns `key`, `owner`, `fence`): the rows whose
 * owner holds the key at that fence, their claim rows locked in key order (see RENEW_MANY), then
 * the episode rows that hold their claims alone, in id order.
 */
export function ownedClaims(input: string): string {
  return `
    SELECT t.* FROM (
      SELECT i.* FROM ${input} i
        JOIN cyclium_work_claims c
          ON ${heldClaim({ key: 'i.key', owner: 'i.owner', fence: 'i.fence' })}
       ORDER BY c.dedupe_key
         FOR SHARE OF c) t
    UNION ALL
    SELECT r.* FROM (${ownedInRows(input)}) r`;
}

/** Extends held leases by `leaseSeconds` from now; `from` and `where` pick the rows. */
export function renewLeases({
  leaseSeconds,
  from,
  where,
  returning,
}: {
  leaseSeconds: string;
  from?: string;
  where: string;
  returning?: string;
}): string {
  return `
    UPDATE cyclium_work_claims AS c
       SET lease_until = now() + make_interval(secs => ${leaseSeconds}), last_heartbeat_at = now()
      ${from === undefined ? '' : `FROM ${from}`}
     WHERE ${where}
    ${returning === undefined ? '' : `RETURNING ${returning}`}`;
}

/**
 * A first claim in the table (attempt 1 unless `attempt` says otherwise; fence 1, which the table's
 * trigger raises above a claim the episode row held): an INSERT that loses on the primary key when
 * the key exists. `rows` is the rest of a `SELECT <values>` (FROM, WHERE, ORDER BY) when the values
 * come from a query; without it the values are one row.
 */
export function insertClaims(
  refs: LeaseRefs & {
    key: string;
    rows?: string;
    returning: string;
    attempt?: string;
  },
): string {
  const withType = refs.workType !== undefined;
  const columns =
    `dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, ` +
    `attempt, fence${withType ? ', work_type' : ''}`;
  const values =
    `${refs.key}, 'claimed', ${refs.owner}, ${refs.leaseFrom} + make_interval(secs ` +
    `=> ${refs.leaseSeconds}), now(), now(), ${refs.attempt ?? '1'}, 1` +
    (withType ? `, ${refs.workType}` : '');
  return `
    INSERT INTO cyclium_work_claims (${columns})
    ${refs.rows === undefined ? `VALUES (${values})` : `SELECT ${values} ${refs.rows}`}
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING ${refs.returning}`;
}

/**
 * The takeover condition, re-checked against the row as it is when the statement reaches it: the
 * fence is the row's version (every acquire and steal bumps it) and the state is the one read, so
 * of any number of concurrent takers exactly one matches; and the row is free to take (finished,
 * or its lease lapsed).
 */
export function stillTakeable(seen: { fence: string; state: string }): string {
  return (
    `c.fence = ${seen.fence} AND c.state = ${seen.state} AND (c.state <> 'claimed' OR ` +
    `c.lease_until < now())`
  );
}

/**
 * Takes over the rows `from` and `where` pick (see stillTakeable): a new owner and lease, fence +
 * 1, and the attempt counted on from a failure or a lapse, restarted after `done`.
 */
export function takeOverClaims(
  refs: LeaseRefs & { from?: string; where: string; returning: string },
): string {
  return `
    UPDATE cyclium_work_claims c
       SET state = 'claimed', owner_node = ${refs.owner},
           lease_until = ${refs.leaseFrom} + make_interval(secs => ${refs.leaseSeconds}),
           claimed_at = now(), last_heartbeat_at = now(), finished_at = NULL, error_detail = NULL,
           attempt = CASE WHEN c.state = 'done' THEN 1 ELSE c.attempt + 1 END,
           fence = c.fence + 1${
             refs.workType === undefined
               ? ''
               : `, work_type = COALESCE(${refs.workType}, c.work_type)`
           }
      ${refs.from === undefined ? '' : `FROM ${refs.from}`}
     WHERE ${refs.where}
    RETURNING ${refs.returning}`;
}

/** `done` when `failure` is NULL, else `failed`. */
export function finishedState(failure: string): string {
  return `CASE WHEN ${failure} IS NULL THEN 'done' ELSE 'failed' END`;
}

/**
 * Completes or fails the claim `owner` holds on `key` at `fence`. The lease may have lapsed: the
 * fence alone tells whether someone took the claim over meanwhile.
 */
export function finishClaims(
  refs: ClaimRefs & {
    state: string;
    detail: string;
    from?: string;
    when?: string;
    returning?: string;
  },
): string {
  return `
    UPDATE cyclium_work_claims c
       SET state = ${refs.state}, finished_at = now(), error_detail = ${refs.detail}
      ${refs.from === undefined ? '' : `FROM ${refs.from}`}
     WHERE c.dedupe_key = ${refs.key} AND c.owner_node = ${refs.owner}
       AND c.state = ${KEYED_CLAIMED} AND c.fence = ${refs.fence}${
         refs.when === undefined ? '' : ` AND (${refs.when})`
       }
    ${refs.returning === undefined ? '' : `RETURNING ${refs.returning}`}`;
}

/**
 * Whether anyone holds a live claim on the episode row `episode` (an SQL alias of cyclium_episodes)
 * names: its key as claimKeyOf spells it, state `claimed`, lease unexpired by the database clock;
 * in the claim table or in the row itself (which mirrors the table's claim when there is one).
 * Never NULL (a row that never held a claim has NULL columns): callers negate it.
 */
export function liveClaimOnEpisode(episode: string): string {
  return `(coalesce(${episode}.claim_state = 'claimed' AND ${episode}.claim_lease_until > now(),
                    false)
           OR EXISTS (SELECT 1 FROM cyclium_work_claims c
            WHERE c.dedupe_key = ${claimKeyOfRow(episode)}
              AND c.state = 'claimed' AND c.lease_until > now()))`;
}

/**
 * The live claims of each node (`owner_node`, `n`): the claim table's, and those of running
 * episodes that hold theirs alone, read through the status index.
 */
export function liveClaimCounts(): string {
  return `
    SELECT owner_node, sum(n)::int AS n FROM (
      SELECT owner_node, count(*) AS n FROM cyclium_work_claims
       WHERE state = 'claimed' AND lease_until > now() GROUP BY owner_node
      UNION ALL
      SELECT e.claim_owner, count(*) FROM cyclium_episodes e
       WHERE e.status = 'running' AND e.claim_state = 'claimed' AND e.claim_lease_until > now()
         AND ${OWN_CLAIM_IN_ROW}
       GROUP BY e.claim_owner) held
     GROUP BY owner_node`;
}

/**
 * Drops the finished claims whose keys `keys` (a query of one text column) lists, when retention
 * deletes the work they guarded. A claim someone holds stays, whatever its key.
 */
export function deleteFinishedClaims(keys: string): string {
  return (
    `DELETE FROM cyclium_work_claims c WHERE c.dedupe_key = ANY (ARRAY(${keys})) AND ` +
    `c.state <> 'claimed'`
  );
}
