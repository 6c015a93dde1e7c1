import { prepared } from '../sql/sql-executor.js';
import {
  finishClaims,
  heldClaim,
  insertClaims,
  ownedClaim,
  renewLeases,
  stillTakeable,
  takeOverClaims,
} from './claim-sql.js';
import { claimKeyOfRow } from './claim-keys.js';
import {
  claimInRow,
  OWN_CLAIM_IN_ROW,
  rowRenewal,
  writeRowClaim,
  writeRowClaims,
} from './row-claim-sql.js';

/** The prepared statements PostgresClaims sends on its own, in the shapes of claim-sql.ts. */

/** What INSERT_OR_READ and TAKE_OVER return. */
export interface ClaimRow {
  inserted: boolean;
  /** The holder of a lapsed claim its episode row held alone, which the insert took over. */
  stolen_from?: string | null;
  state: 'claimed' | 'done' | 'failed';
  owner_node: string;
  fence: string;
  attempt: number;
  lease_until: Date;
  expired: boolean;
}

/** A claim's refs as the single statements number them: $1 key, $2 owner, $3 fence. */
const POSITIONAL = { key: '$1', owner: '$2', fence: '$3' };

/**
 * One statement for the common cases: insert a first claim, or, when the key exists, read it.
 * The lease runs from this statement (clock_timestamp()), not from its transaction's start
 * (now()): inside a longer transaction the holder's local deadline counts from when this statement
 * was sent, and it must not outlast the lease the database granted (rule 1).
 * The read uses this statement's snapshot, so a row another node inserted and committed while we
 * waited on its conflict is invisible here; no row at all therefore means a claim younger than us:
 * busy, which is the right answer.
 * An episode that holds its claim in its own row (`in_row`) is taken over by this insert as a
 * takeover of a claim-table row would: attempt counted on unless it was done, its holder reported.
 * Its fence rises above the row's (the table's trigger sees to it); while the row's claim is live,
 * the trigger skips the insert: busy.
 */
export const INSERT_OR_READ = prepared(
  'claims_insert_or_read',
  `
  WITH in_row AS (
    SELECT e.claim_owner, e.claim_state, e.claim_attempt FROM cyclium_episodes e
     WHERE ${claimInRow('$1::text')} AND e.claim_fence IS NOT NULL),
  inserted AS (${insertClaims({
    key: '$1',
    owner: '$2',
    leaseSeconds: '$3',
    leaseFrom: 'clock_timestamp()',
    workType: '$4',
    rows: 'FROM (SELECT 1) one LEFT JOIN in_row r ON true',
    attempt: `CASE WHEN r.claim_state IN ('claimed', 'failed') THEN r.claim_attempt + 1 ELSE 1 END`,
    returning:
      `true AS inserted, state, owner_node, fence, attempt, lease_until, false AS expired, ` +
      `(SELECT claim_owner FROM in_row WHERE claim_state = 'claimed') AS stolen_from`,
  })}
  )
  SELECT * FROM inserted
  UNION ALL
  SELECT false, state, owner_node, fence, attempt, lease_until, lease_until < now(), NULL
    FROM cyclium_work_claims
   WHERE dedupe_key = $1 AND NOT EXISTS (SELECT 1 FROM inserted)`,
);

/**
 * Takeover of a finished row or a lapsed lease, conditioned on the fence ($5) and state ($6) read.
 */
export const TAKE_OVER = prepared(
  'claims_take_over',
  takeOverClaims({
    owner: '$2',
    leaseSeconds: '$3',
    leaseFrom: 'clock_timestamp()',
    workType: '$4',
    where: `c.dedupe_key = $1 AND ${stillTakeable({ fence: '$5', state: '$6' })}`,
    returning: 'c.fence, c.attempt, c.lease_until',
  }),
);

/** $4 NULL: whichever generation `owner` holds. In the claim table or the episode row. */
export const RENEW = prepared(
  'claims_renew',
  `
  WITH renewed AS (${renewLeases({
    leaseSeconds: '$3',
    where: heldClaim({ key: '$1', owner: '$2', fence: 'coalesce($4::bigint, c.fence)' }),
    returning: '1',
  })}),
  ${writeRowClaim(
    rowRenewal({
      from: '(SELECT $1::text AS dedupe_key) held',
      owner: '$2',
      fence: 'coalesce($4::bigint, e.claim_fence)',
      leaseSeconds: '$3',
      returning: 'held.dedupe_key',
    }),
  )}
  SELECT 1 FROM renewed UNION ALL SELECT 1 FROM row_renewed`,
);

/**
 * Every live claim of one node in one statement: the heartbeat's whole cost per tick. Statements
 * that lock several claim rows (this one, the release and batched step writes) lock them in key
 * order, so they wait for each other instead of deadlocking.
 */
export const RENEW_MANY = prepared(
  'claims_renew_many',
  `
  WITH locked AS (
    SELECT c.dedupe_key FROM cyclium_work_claims c
      JOIN unnest($3::text[], $4::bigint[]) AS held (dedupe_key, fence)
        ON ${heldClaim({ key: 'held.dedupe_key', owner: '$1', fence: 'held.fence' })}
     ORDER BY c.dedupe_key
       FOR UPDATE OF c),
  renewed AS (${renewLeases({
    leaseSeconds: '$2',
    from: 'locked',
    where: 'c.dedupe_key = locked.dedupe_key',
    returning: 'c.dedupe_key, c.fence',
  })}),
  ${writeRowClaims(
    rowRenewal({
      from: 'unnest($3::text[], $4::bigint[]) AS held (dedupe_key, fence)',
      owner: '$1',
      fence: 'held.fence',
      leaseSeconds: '$2',
      returning: 'held.dedupe_key, held.fence',
    }),
  )}
  SELECT dedupe_key, fence FROM renewed
  UNION ALL
  SELECT dedupe_key, fence FROM row_renewed`,
);

/**
 * Lapses the leases (state stays `claimed`): the next taker steals in place, with fence + 1. In key
 * order, as RENEW_MANY.
 */
export const RELEASE_MANY = prepared(
  'claims_release_many',
  `
  WITH locked AS (
    SELECT dedupe_key FROM cyclium_work_claims
     WHERE owner_node = $1 AND state = 'claimed' AND dedupe_key = ANY($2::text[])
       AND lease_until > now()
     ORDER BY dedupe_key
       FOR UPDATE),
  released AS (
    UPDATE cyclium_work_claims AS c SET lease_until = now()
      FROM locked
     WHERE c.dedupe_key = locked.dedupe_key
    RETURNING 1),
  ${writeRowClaims({
    name: 'row_released',
    from: 'unnest($2::text[]) AS held (dedupe_key)',
    key: 'held.dedupe_key',
    where: `e.claim_owner = $1 AND e.claim_state = 'claimed' AND e.claim_lease_until > now()`,
    set: 'claim_lease_until = now()',
    returning: 'held.dedupe_key',
  })}
  SELECT 1 FROM released UNION ALL SELECT 1 FROM row_released`,
);

/**
 * $3 the state to finish in, $4 the failure, $5 the fence (NULL: whichever generation `owner`
 * holds).
 */
export const FINISH = prepared(
  'claims_finish',
  `
  WITH finished AS (${finishClaims({
    key: '$1',
    owner: '$2',
    fence: 'coalesce($5::bigint, c.fence)',
    state: '$3',
    detail: '$4',
    returning: '1',
  })}),
  ${writeRowClaim({
    name: 'row_finished',
    from: '(SELECT $1::text AS dedupe_key) held',
    key: 'held.dedupe_key',
    where:
      `e.claim_owner = $2 AND e.claim_state = 'claimed' AND ` +
      `e.claim_fence = coalesce($5::bigint, e.claim_fence)`,
    set: 'claim_state = $3',
    returning: 'held.dedupe_key',
  })}
  SELECT 1 FROM finished UNION ALL SELECT 1 FROM row_finished`,
);

export const OWNS = prepared('claims_owns', ownedClaim(POSITIONAL, false));

/**
 * The ownership proof at $1..$3, holding the claim row: the first statement of a fenced
 * transaction.
 */
export const OWNER_CTE = ownedClaim(POSITIONAL, true);

export const PROVE_OWNERSHIP = prepared('claims_prove_ownership', OWNER_CTE);

export const RECLAIM_EXPIRED = prepared(
  'claims_reclaim_expired',
  `
  SELECT * FROM (
    SELECT dedupe_key, owner_node, fence, lease_until, work_type FROM cyclium_work_claims
     WHERE state = 'claimed' AND lease_until < now()
    UNION ALL
    SELECT ${claimKeyOfRow('e')}, e.claim_owner, e.claim_fence, e.claim_lease_until, NULL
      FROM cyclium_episodes e
     WHERE e.status = 'running' AND e.claim_state = 'claimed' AND e.claim_lease_until < now()
       AND ${OWN_CLAIM_IN_ROW}) lapsed
   ORDER BY lease_until
   LIMIT $1`,
);
