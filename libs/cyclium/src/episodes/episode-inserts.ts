import type { Statement } from '../sql/statement.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import { claimKeyOf } from '../claims/claim-keys.js';
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
 * The rows of an insert as one unnest() of column arrays (one row or many, the same text), in
 * input order (`n`), each with the key its claim is held under (`key`).
 */
export function episodeInput(statement: Statement, rows: readonly EpisodeInsert[]): string {
  const input = statement.arrays([
    [rows.map((r) => r.id), 'uuid[]'],
    [rows.map((r) => claimKeyOf(r)), 'text[]'],
    [rows.map((r) => r.actorId), 'text[]'],
    [rows.map((r) => r.expectationId), 'text[]'],
    [rows.map((r) => r.triggerType), 'text[]'],
    [rows.map((r) => r.triggerRef), 'jsonb[]'],
    [rows.map((r) => r.dedupeKey), 'text[]'],
    [rows.map((r) => r.status), 'text[]'],
    [rows.map((r) => r.ownerNode), 'text[]'],
    [rows.map((r) => r.maxAttempts), 'int[]'],
    [rows.map((r) => r.sourceStack), 'text[]'],
    [rows.map((r) => r.sourceEnv), 'text[]'],
    [rows.map((r) => r.workflowInstanceId), 'uuid[]'],
    [rows.map((r) => r.workflowStepId), 'text[]'],
    [rows.map((r) => r.startedAt), 'timestamptz[]'],
    [rows.map((r) => r.waits), 'boolean[]'],
    [rows.map((r) => r.insertBefore), 'timestamptz[]'],
    [rows.map((r) => r.signature), 'text[]'],
    [rows.map((r) => r.flow?.key ?? null), 'text[]'],
    [rows.map((r) => r.flow?.rateKey ?? null), 'text[]'],
    [rows.map((r) => r.flow?.priority ?? 0), 'int[]'],
    [rows.map((r) => r.version), 'text[]'],
  ]);
  return `SELECT * FROM unnest(${input}) WITH ORDINALITY AS i (${INPUT_COLUMNS.join(', ')})`;
}

/** The columns of an episodeInput, in order: `key` is the claim's, `n` the row's place. */
export const INPUT_COLUMNS = [
  'id',
  'key',
  'actor_id',
  'expectation_id',
  'trigger_type',
  'trigger_ref',
  'dedupe_key',
  'status',
  'owner_node',
  'max_attempts',
  'source_stack',
  'source_env',
  'workflow_instance_id',
  'workflow_step_id',
  'started_at',
  'waits',
  'insert_before',
  'signature',
  'flow_key',
  'rate_key',
  'priority',
  'version',
  'n',
] as const;

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
  return {
    actor_id: insert.actorId,
    expectation_id: insert.expectationId,
    trigger_type: insert.triggerType,
    dedupe_key: insert.dedupeKey,
    status: insert.status,
    phase: null,
    max_attempts: insert.maxAttempts,
    error_class: null,
    error_detail: null,
    summary: null,
    classification: null,
    owner_node: insert.ownerNode,
    workflow_instance_id: insert.workflowInstanceId,
    workflow_step_id: insert.workflowStepId,
    source_stack: insert.sourceStack,
    source_env: insert.sourceEnv,
    finished_at: null,
    archived_at: null,
    cancel_requested_at: null,
    signature: insert.signature,
    waiting_for: null,
    result: null,
    flow_key: insert.flow?.key ?? null,
    rate_key: insert.flow?.rateKey ?? null,
    priority: insert.flow?.priority ?? 0,
    version: insert.version,
    ...returned,
  };
}

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
 * The one insert of cyclium_episodes, for one row or many: the rows of `input` (a CTE name, or a
 * parenthesised `episodeInput`), in key order, so two batches that meet on dedupe keys wait for
 * each other instead of deadlocking. Unless `duplicates` is `fail` (a seed, or rows without a
 * dedupe key: isFresh), the dedupe index decides: a row whose key a live episode holds is skipped.
 * A row past its `insert_before` is skipped too, checked by the clock as late as the statement
 * can. Returns the rows written: whole, or `begun` (BEGUN_COLUMNS, for begunRow).
 */
export function insertEpisodes(
  input: string,
  duplicates: 'skip' | 'fail' = 'skip',
  returning: 'row' | 'begun' = 'row',
): string {
  return `
    INSERT INTO cyclium_episodes
      (id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node,
       max_attempts, source_stack, source_env, workflow_instance_id, workflow_step_id, started_at,
       queued_at, signature, flow_key, rate_key, priority, version)
    SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node,
           max_attempts, source_stack, source_env, workflow_instance_id, workflow_step_id,
           coalesce(started_at, CASE WHEN status = 'running' THEN now() END),
           CASE WHEN waits THEN now() END, signature, flow_key, rate_key, priority, version
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
