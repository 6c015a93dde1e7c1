import type { ClaimFragments } from '../claims/work-claims-adapter.interface.js';

/**
 * A statement to run fenced: `body` continues a `WITH owner AS (...)` query (see
 * `fencedStatement`); `name` prepares it once per connection, so it must be unique per body.
 */
export interface FencedStatement {
  name: string;
  body: string;
}

/** How claims take part in a statement the library composes (see Statement). */
export interface ClaimsInStatement {
  /**
   * The statement itself proves, takes and finishes the claim (the adapter has `inTransaction`).
   */
  joined: boolean;
  fragments: ClaimFragments;
  /** Names the fragments' variant in the statement's prepared name. */
  shape: 'joined' | 'open';
}

/**
 * Claims outside the statement: with claims off, or with a custom adapter whose store is elsewhere
 * (the caller then asks `owns()` before and finishes the claim through the adapter after commit).
 * `owner` always has its row and `claim` always has one (a passthrough grant).
 */
const OPEN_FRAGMENTS: ClaimFragments = {
  // The refs are selected and dropped: every parameter of a statement must appear in its text.
  owner: ({ key, owner, fence }) => `SELECT 1 FROM (SELECT ${key}, ${owner}, ${fence}) AS unused`,
  acquire: ({ key, owner, leaseSeconds, workType }) => [
    [
      'claim',
      `SELECT NULL::bigint AS fence, NULL::int AS attempt, NULL::timestamptz AS lease_until,
              NULL::text AS stolen_from
         FROM (SELECT ${key}, ${owner}, ${leaseSeconds}, ${workType}) AS unused`,
    ],
  ],
  finish: ({ key, owner, fence, failure, when }) =>
    `SELECT 1 FROM (SELECT ${key}, ${owner}, ${fence}, ${failure}) AS unused WHERE (${when})`,
};

export const OPEN_CLAIMS: ClaimsInStatement = {
  joined: false,
  fragments: OPEN_FRAGMENTS,
  shape: 'open',
};

/**
 * The open `owner` at a fenced statement's $1 key, $2 owner, $3 fence (see
 * WorkClaims.fencedStatement).
 */
export const OPEN_OWNER_CTE = OPEN_FRAGMENTS.owner({
  key: '$1::text',
  owner: '$2::text',
  fence: '$3::bigint',
});
