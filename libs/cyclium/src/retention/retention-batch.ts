import type { QueryConfig } from 'pg';
import { deleteFinishedClaims } from '../claims/claim-sql.js';
import { deleteRequestsOf } from '../dispatch/trigger-requests.service.js';
import { EpisodeRetention, type RetentionScope } from '../episodes/episode-retention.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Statement } from '../sql/statement.js';
import { WorkflowRetention } from '../workflows/workflow-retention.js';
import { deleteEventWaitsOf } from '../waits/event-waits.store.js';
import { deleteSignalsOf } from '../waits/signal-store.js';

/** The first key of retention's advisory lock; the second is the scope's hash. */
const LOCK_CLASS = 1_668_183_404;

export interface BatchResult {
  /** False when another node of the scope held the lock: this one did nothing. */
  held: boolean;
  archived: number;
  deleted: number;
  instances: number;
}

type Windows = NonNullable<ResolvedCycliumOptions['retention']>;

/**
 * One batch of retention, as one statement: archive up to `batchSize` finished episodes past
 * `archiveAfter`, delete up to as many archived past `deleteAfter` with their journal, checkpoints,
 * trigger requests, signals, event waits and claims (outputs follow by cascade), and finished
 * workflow instances past both windows. The transaction-scoped advisory lock on the stack and env
 * makes it one node's at a time without a held connection (a pooler in transaction mode keeps it),
 * and a node that does not get it reads nothing. Everything is by the database clock (rule 1).
 */
export async function runRetentionBatch(
  sql: SqlExecutor,
  scope: RetentionScope,
  windows: Windows,
): Promise<BatchResult> {
  const { rows } = await sql.query<BatchResult>(retentionBatch(scope, windows));
  return rows[0] ?? { held: false, archived: 0, deleted: 0, instances: 0 };
}

/** The statement of one batch (runRetentionBatch), for a test to EXPLAIN. */
export function retentionBatch(scope: RetentionScope, windows: Windows): QueryConfig {
  const statement = new Statement('retention');
  const scopeKey = statement.param(JSON.stringify([scope.stack, scope.env]), 'text');
  statement.with(
    'lock',
    `SELECT pg_try_advisory_xact_lock(${LOCK_CLASS}, hashtext(${scopeKey})) AS held`,
  );
  const when = '(SELECT held FROM lock)';
  statement.with(
    'archive_due',
    EpisodeRetention.dueForArchive(statement, scope, windows.archiveAfter, windows.batchSize, when),
  );
  statement.with('archived', EpisodeRetention.archive('archive_due'));
  statement.with('archived_checkpoints', EpisodeRetention.dropCheckpoints('archived'));
  let counts = `0 AS deleted, 0 AS instances`;
  if (windows.deleteAfter !== null) {
    statement.with(
      'delete_due',
      EpisodeRetention.dueForDelete(statement, scope, windows.deleteAfter, windows.batchSize, when),
    );
    statement.with('deleted_steps', EpisodeRetention.deleteSteps('delete_due'));
    statement.with('deleted_checkpoints', EpisodeRetention.dropCheckpoints('delete_due'));
    statement.with('deleted_requests', deleteRequestsOf(statement, 'delete_due'));
    statement.with('deleted_signals', deleteSignalsOf('delete_due'));
    statement.with('deleted_event_waits', deleteEventWaitsOf('delete_due'));
    const instanceAge = windows.archiveAfter + windows.deleteAfter;
    statement.with(
      'instance_due',
      WorkflowRetention.due(statement, scope, instanceAge, windows.batchSize, when),
    );
    statement.with('deleted_instances', WorkflowRetention.delete(statement, 'instance_due'));
    statement.with(
      'deleted_claims',
      deleteFinishedClaims(`SELECT claim_key FROM delete_due WHERE claim_key IS NOT NULL
                             UNION ALL SELECT claim_key FROM deleted_requests
                             UNION ALL SELECT claim_key FROM deleted_instances`),
    );
    statement.with('deleted', EpisodeRetention.deleteEpisodes('delete_due'));
    counts =
      '(SELECT count(*) FROM deleted)::int AS deleted, ' +
      '(SELECT count(*) FROM deleted_instances)::int AS instances';
  }
  return statement.build(
    `SELECT coalesce((SELECT held FROM lock), false) AS held, (SELECT count(*) FROM ` +
      `archived)::int AS archived, ${counts}`,
  );
}
