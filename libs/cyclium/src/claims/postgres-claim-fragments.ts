import {
  finishClaims,
  finishedState,
  insertClaims,
  ownedClaim,
  ownedClaims,
  stillTakeable,
  takeOverClaims,
} from './claim-sql.js';
import { claimInRow } from './row-claim-sql.js';
import type { ClaimFragments } from './work-claims-adapter.interface.js';

/** Completes or fails the claim at `fence` when `when` holds, `RETURNING 1`. */
function finishing(
  { key, owner, fence, failure }: { key: string; owner: string; fence: string; failure: string },
  when: string,
): string {
  return finishClaims({
    key,
    owner,
    fence,
    state: finishedState(`${failure}::text`),
    detail: failure,
    when,
    returning: '1',
  });
}

/**
 * The claim of `acquire` for a key a row may hold. The row as this statement sees it decides,
 * exactly as in INSERT_OR_READ + TAKE_OVER: no row means insert (a concurrent first claim makes it
 * busy); a row is taken over only in the state read.
 */
function acquireAsSeen({
  key,
  owner,
  leaseSeconds,
  workType,
  when,
  inRow = 'false',
}: {
  key: string;
  owner: string;
  leaseSeconds: string;
  workType: string;
  when: string;
  inRow?: string;
}): Array<[string, string]> {
  return [
    [
      'claim_seen',
      `SELECT state, owner_node, fence FROM cyclium_work_claims WHERE dedupe_key = ${key}`,
    ],
    [
      'claim_new',
      insertClaims({
        key,
        owner,
        leaseSeconds,
        leaseFrom: 'now()',
        workType,
        rows: `WHERE (${when}) AND NOT (${inRow}) AND NOT EXISTS (SELECT 1 FROM claim_seen)`,
        returning: 'fence, attempt, lease_until, NULL::text AS stolen_from',
      }),
    ],
    [
      'claim_in_row',
      firstInRow(
        leaseSeconds,
        `WHERE (${when}) AND (${inRow}) AND NOT EXISTS (SELECT 1 FROM claim_seen)`,
      ),
    ],
    [
      'claim_taken',
      takeOverClaims({
        owner,
        leaseSeconds,
        leaseFrom: 'now()',
        workType,
        from: 'claim_seen seen',
        where:
          `(${when}) AND c.dedupe_key = ${key} AND ` +
          `${stillTakeable({ fence: 'seen.fence', state: 'seen.state' })}`,
        returning:
          `c.fence, c.attempt, c.lease_until, CASE WHEN seen.state = 'claimed' THEN ` +
          `seen.owner_node END AS stolen_from`,
      }),
    ],
    [
      'claim',
      `SELECT * FROM claim_new UNION ALL SELECT * FROM claim_in_row UNION ALL ` +
        `SELECT * FROM claim_taken`,
    ],
  ];
}

/**
 * The first claim an inserted episode row took itself (RowClaim), as a claim CTE reports it: fence
 * 1, attempt 1, the lease from `now()`, the expressions the row was written with. `key`, when
 * given, is the key column's expression.
 */
function firstInRow(leaseSeconds: string, rows: string, key?: string): string {
  return `SELECT ${key === undefined ? '' : `${key} AS key, `}1::bigint AS fence, 1 AS attempt,
              now() + make_interval(secs => ${leaseSeconds}) AS lease_until,
              NULL::text AS stolen_from ${rows}`;
}

/**
 * The claim of keys no row can hold yet (`fresh`): the keys of the episodes the statement inserts,
 * whose rows take the claim themselves (RowClaim, `episodeRows`). Nothing to write: the claim as
 * the rows hold it, by the same expressions (fence 1, attempt 1, the lease from `now()`).
 */
function acquireFresh(leaseSeconds: string, key: string, rows: string): Array<[string, string]> {
  return [['claim', firstInRow(leaseSeconds, rows, key)]];
}

/**
 * `acquire` for many keys, each decided on the row as this statement sees it; takeovers lock in
 * key order (a lock re-reads the row, so a taker that lost the race finds no match: busy).
 */
function acquireManyAsSeen(
  input: string,
  owner: string,
  leaseSeconds: string,
  inRow = 'false',
): Array<[string, string]> {
  const unseen = 'NOT EXISTS (SELECT 1 FROM claim_seen seen WHERE seen.dedupe_key = i.key)';
  return [
    [
      'claim_seen',
      `SELECT c.dedupe_key, c.state, c.owner_node, c.fence FROM cyclium_work_claims c JOIN ` +
        `${input} i ON i.key = c.dedupe_key`,
    ],
    [
      'claim_new',
      insertClaims({
        key: 'i.key',
        owner,
        leaseSeconds,
        leaseFrom: 'now()',
        rows: `FROM ${input} i WHERE NOT (${inRow}) AND ${unseen} ORDER BY i.key`,
        returning: 'dedupe_key AS key, fence, attempt, lease_until, NULL::text AS stolen_from',
      }),
    ],
    [
      'claim_in_row',
      firstInRow(leaseSeconds, `FROM ${input} i WHERE (${inRow}) AND ${unseen}`, 'i.key'),
    ],
    [
      'claim_lapsed',
      `SELECT c.dedupe_key, seen.state AS seen_state, seen.owner_node AS seen_owner
        FROM cyclium_work_claims c
         JOIN claim_seen seen ON seen.dedupe_key = c.dedupe_key
        WHERE ${stillTakeable({ fence: 'seen.fence', state: 'seen.state' })}
        ORDER BY c.dedupe_key
          FOR UPDATE OF c`,
    ],
    [
      'claim_taken',
      takeOverClaims({
        owner,
        leaseSeconds,
        leaseFrom: 'now()',
        from: 'claim_lapsed l',
        where: 'c.dedupe_key = l.dedupe_key',
        returning:
          `c.dedupe_key AS key, c.fence, c.attempt, c.lease_until, CASE WHEN ` +
          `l.seen_state = 'claimed' THEN l.seen_owner END AS stolen_from`,
      }),
    ],
    [
      'claim',
      `SELECT * FROM claim_new UNION ALL SELECT * FROM claim_in_row UNION ALL ` +
        `SELECT * FROM claim_taken`,
    ],
  ];
}

/**
 * PostgresClaims' claims as CTEs of the library's one-round-trip statements, in the shapes of
 * claim-sql.ts. A lease taken here runs from `now()`: the statement's transaction is the caller's
 * step, and its holder's deadline counts from when the statement was sent.
 */
export const POSTGRES_CLAIM_FRAGMENTS: ClaimFragments = {
  owner: (refs) => ownedClaim(refs, true),
  ownerMany: ({ input }) => ownedClaims(input),
  acquire: (refs) =>
    refs.fresh === true
      ? acquireFresh(refs.leaseSeconds, refs.key, `WHERE (${refs.when})`)
      : acquireAsSeen(refs),
  finish: (refs) => finishing(refs, refs.when),
  // finish, with the lease `owner` checks: the write is the proof.
  finishHeld: (refs) => finishing(refs, `c.lease_until > now() AND (${refs.when})`),
  acquireMany: ({ input, owner, leaseSeconds, fresh, inRow }) =>
    fresh === true
      ? acquireFresh(leaseSeconds, 'i.key', `FROM ${input} i`)
      : acquireManyAsSeen(input, owner, leaseSeconds, inRow),
  finishMany: ({ input }) =>
    finishClaims({
      key: 'i.key',
      owner: 'i.owner',
      fence: 'i.fence',
      state: finishedState('i.failure'),
      detail: 'i.failure',
      from: `${input} i`,
      returning: '1',
    }),
  episodeRows: true,
  finished: ({ key, owner, fence }) => `
    SELECT 1 FROM cyclium_work_claims
     WHERE dedupe_key = ${key} AND owner_node = ${owner} AND fence = ${fence}
       AND state IN ('done', 'failed')
    UNION ALL
    SELECT 1 FROM cyclium_episodes e
     WHERE ${claimInRow(key)} AND e.claim_owner = ${owner} AND e.claim_fence = ${fence}
       AND e.claim_state IN ('done', 'failed')`,
};
