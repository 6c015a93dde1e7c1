import { sameEnvIndexed, stackCovers } from '../scope/scope-predicates.js';
import type { Statement } from '../sql/statement.js';
import { libraryKeySql } from '../claims/claim-keys.js';

/**
 * Whose finished work a retention pass handles: a node's stack and env (rule 8: the stack covers
 * rows with none).
 */
export interface RetentionScope {
  stack: string | null;
  env: string | null;
}

const TERMINAL = `('done', 'partially_failed', 'failed', 'canceled')`;

/**
 * "No row of `from`", as a subquery checked per candidate. A `NOT EXISTS` would be planned as an
 * anti-join, which reads every due row (half the history, once retention has a backlog) before the
 * limit applies; a filter keeps the oldest-first index scan stopping at the batch's size.
 */
function none(from: string): string {
  return `(SELECT count(*) FROM (SELECT 1 FROM ${from} LIMIT 1) x) = 0`;
}

/**
 * What oldestDue reads: `columns` of `table` (aliased `aged`) whose `age` column is older than
 * `olderThanMs`.
 */
export interface DueRows {
  table: string;
  columns: string;
  age: string;
  olderThanMs: number;
  limit: number;
  /** More conditions on `aged`. */
  and?: readonly string[];
}

/**
 * The oldest `limit` rows of the scope past their window, by the database clock, read only when
 * `when` holds (the pass's lock) and locked `SKIP LOCKED`: the shape every retention read shares,
 * spelled to match the `(source_env, <age>)` indexes of migration 13: the env is one value, but an
 * `IS NULL` on it does not tell the planner the index is in age order; ordering by both does.
 */
export function oldestDue(
  statement: Statement,
  scope: RetentionScope,
  due: DueRows,
  when: string,
): string {
  const p = (value: unknown, cast: string) => statement.param(value, cast);
  return `
      SELECT ${due.columns} FROM ${due.table} aged
       WHERE ${when}
         AND ${sameEnvIndexed('aged.source_env', p(scope.env, 'text'), scope.env)}
         AND aged.${due.age} IS NOT NULL
         AND aged.${due.age}
               < now() - make_interval(secs => ${p(due.olderThanMs, 'double precision')} / 1000)
         AND ${stackCovers('aged.source_stack', p(scope.stack, 'text'))}${(due.and ?? [])
           .map(
             (c) => `
         AND ${c}`,
           )
           .join('')}
       ORDER BY aged.source_env, aged.${due.age}
       LIMIT ${p(due.limit, 'int')}
       FOR UPDATE OF aged SKIP LOCKED`;
}

/**
 * The SQL of retention on cyclium_episodes, its journal and checkpoints, as CTE bodies a retention
 * statement composes (each room keeps its own tables' SQL). `when` gates every read: the pass's
 * lock, so a node that does not hold it reads nothing. Rows are taken oldest first by the partial
 * indexes of migration 13, `SKIP LOCKED`, so a pass never waits on a row a runner or another
 * stack's pass holds; what it skips, the next pass takes.
 */
export const EpisodeRetention = {
  /**
   * Finished episodes of the scope older than `olderThanMs`, not yet archived. An episode of a
   * workflow instance still running stays: the instance's step keys must keep deduping.
   */
  dueForArchive(
    statement: Statement,
    scope: RetentionScope,
    olderThanMs: number,
    limit: number,
    when: string,
  ): string {
    return oldestDue(
      statement,
      scope,
      {
        table: 'cyclium_episodes',
        columns: 'aged.id',
        age: 'finished_at',
        olderThanMs,
        limit,
        and: [
          'aged.archived_at IS NULL',
          `aged.status IN ${TERMINAL}`,
          `(aged.workflow_instance_id IS NULL OR ` +
            `${none(
              'cyclium_workflow_instances w WHERE w.id = aged.workflow_instance_id AND ' +
                'w.finished_at IS NULL',
            )})`,
        ],
      },
      when,
    );
  },

  /**
   * Archives the episodes of `due` (column `id`) that are finished and not archived yet: their
   * dedupe keys are free from now.
   */
  archive(due: string): string {
    return `
      UPDATE cyclium_episodes e SET archived_at = now()
       WHERE e.id = ANY (ARRAY(SELECT id FROM ${due})) AND e.finished_at IS NOT NULL
         AND e.archived_at IS NULL AND e.status IN ${TERMINAL}
      RETURNING e.id`;
  },

  /** A finished episode never resumes, so its checkpoints are dead weight once it is archived. */
  dropCheckpoints(of: string): string {
    return (
      `DELETE FROM cyclium_episode_checkpoints c WHERE c.episode_id = ANY (ARRAY(SELECT id ` +
      `FROM ${of}))`
    );
  },

  /**
   * Archived episodes of the scope older than `olderThanMs`, with the claim key a deletion may
   * drop: the episode's own (`episode:<id>`, never used again) or its dedupe key, unless the key
   * was a host's manual one, which a later trigger may take up again (the claim row then serves
   * it). An episode with an output still pending waits for its delivery to end.
   */
  dueForDelete(
    statement: Statement,
    scope: RetentionScope,
    olderThanMs: number,
    limit: number,
    when: string,
  ): string {
    return oldestDue(
      statement,
      scope,
      {
        table: 'cyclium_episodes',
        columns:
          `aged.id, CASE WHEN aged.dedupe_key IS NULL THEN 'episode:' || aged.id WHEN ` +
          `${libraryKeySql('aged.trigger_type')} THEN aged.dedupe_key END AS claim_key`,
        age: 'archived_at',
        olderThanMs,
        limit,
        and: [none(`cyclium_outputs o WHERE o.episode_id = aged.id AND o.status = 'pending'`)],
      },
      when,
    );
  },

  /** The journal of the episodes of `due`. */
  deleteSteps(due: string): string {
    return (
      `DELETE FROM cyclium_episode_steps s WHERE s.episode_id = ANY (ARRAY(SELECT id FROM ` +
      `${due}))`
    );
  },

  /**
   * The episodes of `due`; their outputs go by the foreign key's cascade, findings keep their rows
   * with the episode unset.
   */
  deleteEpisodes(due: string): string {
    return (
      `DELETE FROM cyclium_episodes e WHERE e.id = ANY (ARRAY(SELECT id FROM ${due})) ` +
      `RETURNING e.id`
    );
  },
};
