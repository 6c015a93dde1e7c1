import type { Statement } from '../sql/statement.js';
import { batchRows } from '../sql/batch-rows.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import { claimKeyOf, libraryKeySql } from '../claims/claim-keys.js';
import { noClaimRow } from '../claims/row-claim-sql.js';
import type { EpisodeTrigger } from './episode-context.interface.js';
import type { EpisodeFlow } from './flow-limits.js';

/**
 * An episode a writer begins (running) or queues: what it asks for; the insert adds the id and the
 * columns it derives.
 */
export interface NewEpisode {
  actorId: string;
  expectationId: string;
  trigger: EpisodeTrigger;
  dedupeKey: string | null;
  status: Extract<EpisodeStatus, 'running' | 'queued' | 'throttled'>;
  ownerNode: string | null;
  maxAttempts: number;
  sourceStack: string | null;
  sourceEnv: string | null;
  workflowInstanceId?: string | null;
  workflowStepId?: string | null;
  /**
   * Insert only before this time by the database clock, else do as for a duplicate: a bus event's
   * key may have been freed by then (see TriggerSources.fireEvent). Absent: no bound.
   */
  insertBefore?: Date | null;
  /** A limited expectation's partition and priority (flowOf); null or absent: not limited. */
  flow?: EpisodeFlow | null;
  /**
   * The version of the expectation's code on the inserting node, recorded only on a row that
   * starts running there (EpisodeVersions records it on any other row's first run).
   */
  version?: string | null;
}

/** One episode row to insert, every column its writer sets. */
export interface EpisodeInsert {
  id: string;
  actorId: string;
  expectationId: string;
  triggerType: string;
  /** The trigger as JSON text. */
  triggerRef: string;
  dedupeKey: string | null;
  status: EpisodeStatus;
  ownerNode: string | null;
  maxAttempts: number;
  sourceStack: string | null;
  sourceEnv: string | null;
  workflowInstanceId: string | null;
  workflowStepId: string | null;
  /** null: the database clock when the row is running (rule 1), none otherwise. */
  startedAt: Date | null;
  /** The row waits from now (`queued_at`): queued, or deferred to a full node. */
  waits: boolean;
  /** NewEpisode.insertBefore; null for none. */
  insertBefore: Date | null;
  /** With the `integrity` option: EpisodeSignatures.signed; null otherwise. */
  signature: string | null;
  /** NewEpisode.flow; absent: not limited. */
  flow?: EpisodeFlow | null;
  /** NewEpisode.version, on a row inserted running on its node; null otherwise. */
  version: string | null;
}

/**
 * The columns of an insert's input, in order: each one's name, its array's cast, and its value for
 * a row; `stored` when the row keeps the value as given (`key` is the claim's; `waits` and
 * `insert_before` only steer the insert). One table for the input (episodeInput), its column names
 * (INPUT_COLUMNS) and the row a begin hands its run (begunRow).
 */
const INPUT: ReadonlyArray<{
  name: string;
  cast: string;
  value: (r: EpisodeInsert) => unknown;
  stored: boolean;
}> = [
  { name: 'id', cast: 'uuid[]', value: (r) => r.id, stored: true },
  { name: 'key', cast: 'text[]', value: (r) => claimKeyOf(r), stored: false },
  { name: 'actor_id', cast: 'text[]', value: (r) => r.actorId, stored: true },
  { name: 'expectation_id', cast: 'text[]', value: (r) => r.expectationId, stored: true },
  { name: 'trigger_type', cast: 'text[]', value: (r) => r.triggerType, stored: true },
  { name: 'trigger_ref', cast: 'jsonb[]', value: (r) => r.triggerRef, stored: true },
  { name: 'dedupe_key', cast: 'text[]', value: (r) => r.dedupeKey, stored: true },
  { name: 'status', cast: 'text[]', value: (r) => r.status, stored: true },
  { name: 'owner_node', cast: 'text[]', value: (r) => r.ownerNode, stored: true },
  { name: 'max_attempts', cast: 'int[]', value: (r) => r.maxAttempts, stored: true },
  { name: 'source_stack', cast: 'text[]', value: (r) => r.sourceStack, stored: true },
  { name: 'source_env', cast: 'text[]', value: (r) => r.sourceEnv, stored: true },
  {
    name: 'workflow_instance_id',
    cast: 'uuid[]',
    value: (r) => r.workflowInstanceId,
    stored: true,
  },
  { name: 'workflow_step_id', cast: 'text[]', value: (r) => r.workflowStepId, stored: true },
  { name: 'started_at', cast: 'timestamptz[]', value: (r) => r.startedAt, stored: true },
  { name: 'waits', cast: 'boolean[]', value: (r) => r.waits, stored: false },
  { name: 'insert_before', cast: 'timestamptz[]', value: (r) => r.insertBefore, stored: false },
  { name: 'signature', cast: 'text[]', value: (r) => r.signature, stored: true },
  { name: 'flow_key', cast: 'text[]', value: (r) => r.flow?.key ?? null, stored: true },
  { name: 'rate_key', cast: 'text[]', value: (r) => r.flow?.rateKey ?? null, stored: true },
  { name: 'priority', cast: 'int[]', value: (r) => r.flow?.priority ?? 0, stored: true },
  { name: 'version', cast: 'text[]', value: (r) => r.version, stored: true },
];

/** The columns of an episodeInput, in order: `key` is the claim's, `n` the row's place. */
export const INPUT_COLUMNS = [...INPUT.map((c) => c.name), 'n'] as const;

/**
 * The rows of a batched insert as one unnest() of column arrays, in input order (`n`), each with
 * the key its claim is held under (`key`).
 */
export function episodeInput(statement: Statement, rows: readonly EpisodeInsert[]): string {
  const input = statement.arrays(INPUT.map((c) => [rows.map(c.value), c.cast] as const));
  return batchRows(input, 'i', INPUT_COLUMNS.join(', '), statement.param(rows.length, 'int'));
}

/**
 * The row of a lone insert: episodeInput's columns from one scalar parameter each. PostgreSQL
 * binds scalars for less than it parses twenty arrays and unnests them (a lone begin answers about
 * 0.1 ms sooner), and plans the row as the one row it is.
 */
export function episodeRow(statement: Statement, row: EpisodeInsert): string {
  const columns = INPUT.map(
    (c) => `${statement.param(c.value(row), c.cast.slice(0, -'[]'.length))} AS ${c.name}`,
  );
  return `SELECT ${columns.join(', ')}, 1::bigint AS n`;
}

/**
 * What a begin reads back of the rows it inserted: what the database decides (the id to match,
 * jsonb's own form of the trigger, the clock's columns, the counters' defaults). Every other column
 * is the insert's own value (begunRow), so the begin's reply carries a sixth of the row, which
 * pays for itself on every episode (parsed by the server, sent, parsed by pg and mapped here).
 */
export const BEGUN_COLUMNS =
  'id, trigger_ref, attempts, retries, started_at, queued_at, inserted_at, updated_at';

/**
 * The stored row of an episode a begin inserted, as `SELECT *` would read it: `returned` (the
 * BEGUN_COLUMNS) over the insert's own values, and NULL in the columns an insert never sets.
 */
export function begunRow(
  insert: EpisodeInsert,
  returned: Record<string, unknown>,
): Record<string, unknown> {
  // Assigned one by one: spreading objects this wide costs some 30 µs a begin on V8, a loop 1 µs.
  const row: Record<string, unknown> = {};
  for (const name of NEVER_INSERTED) row[name] = null;
  for (const column of STORED) row[column.name] = column.value(insert);
  for (const name of Object.keys(returned)) row[name] = returned[name];
  return row;
}

/** The columns an insert never sets (NULL in a new row). */
const NEVER_INSERTED: readonly string[] = [
  'phase',
  'error_class',
  'error_detail',
  'summary',
  'classification',
  'finished_at',
  'archived_at',
  'cancel_requested_at',
  'waiting_for',
  'result',
];

/** The input's columns a row keeps as given. */
const STORED = INPUT.filter((c) => c.stored);

/**
 * Whether a begin's episode is new in every way: no dedupe key, so its row cannot meet a live
 * one's and its claim key is its new id (claimKeyOf), which no claim row can hold yet. Such rows
 * are inserted without conflict arbiters, which would make each a speculative insert (a second WAL
 * record to confirm it).
 */
export function isFresh(spec: Pick<NewEpisode, 'dedupeKey'>): boolean {
  return spec.dedupeKey === null;
}

/**
 * The first claim of the new episodes an insert begins, held in their rows alone (fence 1,
 * attempt 1, the lease from the transaction's `now()`, as the claim fragment reports it:
 * ClaimFragments.episodeRows). SQL refs: the same ones the claim fragment gets. `when`, over the
 * input row `i`: only the rows where it holds take it (rowFirstClaim); the others leave the
 * columns NULL for the claim table's mirror.
 */
export interface RowClaim {
  owner: string;
  leaseSeconds: string;
  when?: string;
}

/**
 * Input rows `i` (key `i.key`) whose new episode takes its first claim in its own row although it
 * has a dedupe key: the key is one of the library's own (isLibraryKey) and the claim table holds no
 * row for it. Read with the statement's snapshot, as the claim fragment's own look at the table
 * (`inRow`), so both decide alike.
 */
export function rowFirstClaim(i: string): string {
  return `${rowFirstKind(i)} AND ${noClaimRow(`${i}.key`)}`;
}

/** The part of rowFirstClaim a claim fragment gets as `inRow`: the key's kind alone. */
export function rowFirstKind(i: string): string {
  return libraryKeySql(`${i}.trigger_type`);
}

/** The claim columns' values of RowClaim, NULL where its `when` does not hold. */
function rowClaimValues(claim: RowClaim): string {
  const values = [
    claim.owner,
    '1',
    `'claimed'`,
    `now() + make_interval(secs => ${claim.leaseSeconds})`,
    '1',
  ];
  return values
    .map((value) =>
      claim.when === undefined ? value : `CASE WHEN ${claim.when} THEN ${value} END`,
    )
    .join(', ');
}

/**
 * The one insert of cyclium_episodes, for one row or many: the rows of `input` (a CTE name, or a
 * parenthesised `episodeRow` or `episodeInput`), in key order, so two batches that meet on dedupe
 * keys wait for each other instead of deadlocking. Unless `duplicates` is `fail` (a seed, or rows
 * without a dedupe key: isFresh), the dedupe index decides: a row whose key a live episode holds
 * is skipped. A row past its `insert_before` is skipped too, checked by the clock as late as the
 * statement can. Returns the rows written: whole, or `begun` (BEGUN_COLUMNS, for begunRow).
 * `claim`: the rows' first claim, for fresh rows that begin running here (RowClaim).
 */
export function insertEpisodes(
  input: string,
  duplicates: 'skip' | 'fail' = 'skip',
  returning: 'row' | 'begun' = 'row',
  claim?: RowClaim,
): string {
  return `
    INSERT INTO cyclium_episodes
      (id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node,
       max_attempts, source_stack, source_env, workflow_instance_id, workflow_step_id, started_at,
       queued_at, signature, flow_key, rate_key, priority, version${
         claim === undefined
           ? ''
           : ', claim_owner, claim_fence, claim_state, claim_lease_until, claim_attempt'
       })
    SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node,
           max_attempts, source_stack, source_env, workflow_instance_id, workflow_step_id,
           coalesce(started_at, CASE WHEN status = 'running' THEN now() END),
           CASE WHEN waits THEN now() END, signature, flow_key, rate_key, priority, version${
             claim === undefined ? '' : `, ${rowClaimValues(claim)}`
           }
      FROM ${input} i
     WHERE i.insert_before IS NULL OR clock_timestamp() < i.insert_before
     ORDER BY key
    ${
      duplicates === 'skip'
        ? 'ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING'
        : ''
    }
    RETURNING ${returning === 'begun' ? BEGUN_COLUMNS : '*'}`;
}

/**
 * The row `spec` inserts as episode `id`: a running row is owned by `spec.ownerNode`, a waiting one
 * by none until it starts. Unsigned: EpisodeSignatures.signed signs it.
 */
export function insertOf(id: string, spec: NewEpisode, status: EpisodeStatus): EpisodeInsert {
  return {
    id,
    actorId: spec.actorId,
    expectationId: spec.expectationId,
    triggerType: spec.trigger.type,
    triggerRef: JSON.stringify(spec.trigger),
    dedupeKey: spec.dedupeKey,
    status,
    ownerNode: status === 'deferred' || status === 'throttled' ? null : spec.ownerNode,
    maxAttempts: spec.maxAttempts,
    sourceStack: spec.sourceStack,
    sourceEnv: spec.sourceEnv,
    workflowInstanceId: spec.workflowInstanceId ?? null,
    workflowStepId: spec.workflowStepId ?? null,
    startedAt: null,
    waits: status !== 'running',
    insertBefore: spec.insertBefore ?? null,
    signature: null,
    flow: spec.flow ?? null,
    version: status === 'running' && spec.ownerNode !== null ? (spec.version ?? null) : null,
  };
}
