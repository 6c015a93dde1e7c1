import { claimKeyOfRow } from './claim-keys.js';

/**
 * The claims an episode holds in its own row (the `claim_*` columns of cyclium_episodes, migration
 * 31). A begin of a new episode writes its first claim there and nowhere else when the claim table
 * has no row for its key (claimKeyOf: `episode:<id>`, or the dedupe key of an episode a trigger
 * other than a host's manual one started); the claim then lives in the row until someone takes it
 * over, which goes through cyclium_work_claims (insert or takeover), whose triggers carry every
 * claim-table write into the row. So for an episode's key: with no claim-table row, the row holds
 * the claim alone; with one, the table row holds it and the episode row mirrors it. Every statement
 * here acts only on the first case, so a statement that also acts on the table never writes one
 * claim twice. The episode row is always aliased `e`.
 */

/** A key `episode:<uuid>` as claimKeyOf spells it (the migration's triggers read it so too). */
const EPISODE_KEY = `'^episode:[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$'`;

/**
 * The id of the episode an `episode:<uuid>` key names, else NULL, never a cast error. A plain
 * expression over the key, so a lookup `e.id = <this>` reads the primary key, planned generic or
 * not.
 */
function episodeIdOfKey(key: string): string {
  return `CASE WHEN ${key} ~ ${EPISODE_KEY} THEN substr(${key}, 9)::uuid END`;
}

/** The claim table has no row for `key`. */
export function noClaimRow(key: string): string {
  return `NOT EXISTS (SELECT 1 FROM cyclium_work_claims w WHERE w.dedupe_key = ${key})`;
}

/**
 * The id of the episode whose claim key (claimKeyOf) `key` is: the one it names, or the live
 * episode holding it as its dedupe key (the migration's triggers find it so too). Read by the
 * primary key or the live dedupe index; the second read only when the first names none.
 */
function episodeIdOfClaimKey(key: string): string {
  return (
    `coalesce(${episodeIdOfKey(key)}, (SELECT d.id FROM cyclium_episodes d ` +
    `WHERE d.dedupe_key = ${key} AND d.archived_at IS NULL))`
  );
}

/**
 * The row `e` is the one that holds `key`'s claim alone (no claim-table row for it). For one key
 * (a parameter): its dedupe read is an init plan, run only for a key that names no id.
 */
export function claimInRow(key: string): string {
  return (
    `e.id = ${episodeIdOfClaimKey(key)} AND ${claimKeyOfRow('e')} = ${key} AND ` + noClaimRow(key)
  );
}

/** The episode row `e` that holds one key's claim alone (`key`, a parameter), where `on` holds. */
function joinClaimRow(key: string, on: string): string {
  return `JOIN cyclium_episodes e ON ${claimInRow(key)} AND ${on}`;
}

/**
 * claimInRow for a column of many rows (`key`, over a relation before it in a FROM list): joins
 * the episode row `e` that holds each key's claim alone, where `on` holds too. The live episode
 * holding the key as its dedupe key is joined first (`named`), so `e` is read by its primary key
 * from plain columns: a sub-select in the join lets the planner prefer reading all of `e` on a
 * table not yet analysed. An `episode:<id>` key, the common one, probes the dedupe index with NULL,
 * which matches nothing without reading a page.
 */
export function joinClaimRows(key: string, on: string): string {
  return `
    LEFT JOIN cyclium_episodes named
      ON named.dedupe_key = CASE WHEN ${key} !~ ${EPISODE_KEY} THEN ${key} END
     AND named.archived_at IS NULL
    JOIN cyclium_episodes e
      ON e.id = coalesce(${episodeIdOfKey(key)}, named.id) AND ${claimKeyOfRow('e')} = ${key}
     AND ${noClaimRow(key)} AND ${on}`;
}

/** The episode row `e` holds its own claim alone (no claim-table row for its key). */
export const OWN_CLAIM_IN_ROW = noClaimRow(claimKeyOfRow('e'));

/**
 * The episode row `row` holds a claim of `owner` at `fence`, state `claimed`, its lease unexpired
 * by the database clock: heldClaim, in the row's columns.
 */
export function rowHolds(row: string, { owner, fence }: { owner: string; fence: string }): string {
  return (
    `${row}.claim_owner = ${owner} AND ${row}.claim_fence = ${fence} AND ${row}.claim_state = ` +
    `'claimed' AND ${row}.claim_lease_until > now()`
  );
}

/** The proof of one claim held in its row (see ownedClaim). */
export function ownedInRow(
  refs: { key: string; owner: string; fence: string },
  lock: boolean,
): string {
  return (
    `SELECT 1 FROM cyclium_episodes e WHERE ${claimInRow(refs.key)} AND ${rowHolds('e', refs)}` +
    (lock ? ' FOR SHARE OF e' : '')
  );
}

/**
 * The rows of `input` (columns `key`, `owner`, `fence`) whose claim their episode row holds, those
 * rows locked in id order (the order terminal batches and a drain's stamp lock them in).
 */
export function ownedInRows(input: string): string {
  return `
    SELECT i.* FROM ${input} i
      ${joinClaimRows('i.key', rowHolds('e', { owner: 'i.owner', fence: 'i.fence' }))}
     ORDER BY e.id
       FOR SHARE OF e`;
}

interface RowClaimWrite {
  /** The CTEs' name. */
  name: string;
  /** The relation listing the keys. */
  from: string;
  /** The key, a column of `from`. */
  key: string;
  where: string;
  set: string;
  returning: string;
}

/**
 * `SET`s the claim columns in `set` of the episode rows that hold the claims on the keys `from`
 * lists alone, where `where` holds too, as CTEs for a `WITH` list: `${name}_locked` locks them in
 * id order first, and `name` writes them, `RETURNING` the locked rows' `id` and `returning`
 * columns.
 */
export function writeRowClaims(write: RowClaimWrite): string {
  return lockedWrite(write, joinClaimRows(write.key, write.where));
}

/** writeRowClaims where `from` is one row of parameters, read as claimInRow reads one key. */
export function writeRowClaim(write: RowClaimWrite): string {
  return lockedWrite(write, joinClaimRow(write.key, write.where));
}

function lockedWrite({ name, from, set, returning }: RowClaimWrite, rows: string): string {
  return `
  ${name}_locked AS (
    SELECT e.id, ${returning} FROM ${from}
      ${rows}
     ORDER BY e.id
       FOR UPDATE OF e),
  ${name} AS (
    UPDATE cyclium_episodes e SET ${set} FROM ${name}_locked l WHERE e.id = l.id
    RETURNING l.*)`;
}

interface Renewal {
  /** The relation listing the keys, as `held.dedupe_key`. */
  from: string;
  owner: string;
  fence: string;
  leaseSeconds: string;
  returning: string;
}

/**
 * Renews by `leaseSeconds` from now the claims `owner` holds in their rows at `fence` on the keys
 * `from` lists: for writeRowClaims (many keys) or writeRowClaim (one row of parameters), as CTEs
 * named `row_renewed`.
 */
export function rowRenewal(refs: Renewal): RowClaimWrite {
  return {
    name: 'row_renewed',
    from: refs.from,
    key: 'held.dedupe_key',
    where: rowHolds('e', refs),
    set: `claim_lease_until = now() + make_interval(secs => ${refs.leaseSeconds})`,
    returning: refs.returning,
  };
}
