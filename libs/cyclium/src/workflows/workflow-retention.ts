import type { Statement } from '../sql/statement.js';
import { oldestDue, type RetentionScope } from '../episodes/episode-retention.js';
import { instanceClaimKey } from './workflow-advancer.service.js';

/**
 * Retention on cyclium_workflow_instances, as CTE bodies a retention statement composes: finished
 * instances of the scope older than `olderThanMs` (archive plus delete windows, counted from the
 * instance's end, so its episodes went first), oldest first, and the deletion, which returns each
 * instance's claim key (see instanceClaimKey). An episode still pointing at one is unset by the
 * foreign key.
 */
export const WorkflowRetention = {
  due(
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
        table: 'cyclium_workflow_instances',
        columns: 'aged.id',
        age: 'finished_at',
        olderThanMs,
        limit,
      },
      when,
    );
  },

  delete(statement: Statement, due: string): string {
    const prefix = statement.param(instanceClaimKey(''), 'text');
    return (
      `DELETE FROM cyclium_workflow_instances w WHERE w.id = ANY (ARRAY(SELECT id FROM ` +
      `${due})) RETURNING ${prefix} || w.id AS claim_key`
    );
  },
};
