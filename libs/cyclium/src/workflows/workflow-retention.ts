import { sameEnvIndexed, stackCovers } from '../scope/scope-predicates.js';
import type { Statement } from '../sql/statement.js';
import type { RetentionScope } from '../episodes/episode-retention.js';
import { instanceClaimKey } from './workflow-advancer.service.js';

/**
 * Retention on cyclium_workflow_instances, as CTE bodies a retention statement composes: finished
 * instances of the scope older than `olderThanMs` (archive plus delete windows, counted from the
 * instance's end, so its episodes went first), oldest first, and the deletion, which returns each
 * instance's claim key (see instanceClaimKey). An episode still pointing at one is unset by the
 * foreign key.
 */
export const WorkflowRetention = {
  due(statement: Statement, scope: RetentionScope, olderThanMs: number, limit: number, when: string): string {
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    return `
      SELECT w.id FROM cyclium_workflow_instances w
       WHERE ${when}
         AND ${sameEnvIndexed('w.source_env', p(scope.env, 'text'), scope.env)}
         AND w.finished_at IS NOT NULL
         AND w.finished_at < now() - make_interval(secs => ${p(olderThanMs, 'double precision')} / 1000)
         AND ${stackCovers('w.source_stack', p(scope.stack, 'text'))}
       ORDER BY w.finished_at
       LIMIT ${p(limit, 'int')}
       FOR UPDATE OF w SKIP LOCKED`;
  },

  delete(statement: Statement, due: string): string {
    const prefix = statement.param(instanceClaimKey(''), 'text');
    return `DELETE FROM cyclium_workflow_instances w USING ${due} d WHERE w.id = d.id RETURNING ${prefix} || w.id AS claim_key`;
  },
};
