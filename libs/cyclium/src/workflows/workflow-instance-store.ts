import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { CycliumWorkflowInstance, type WorkflowInstanceStatus } from '../entities/workflow-instance.entity.js';
import { emptyWhenAbsent, rowMapper, type RowMapper } from '../entities/row-mapper.js';
import type { StepState } from '../entities/workflow-step-state.js';
import { sameAsCoalesced, sameEnv, stackCovers } from '../scope/scope-predicates.js';

export type WorkflowInstanceRow = CycliumWorkflowInstance;

export interface NewInstance {
  id: string;
  workflowId: string;
  /** The input, already serialised (and checked) as JSON. */
  inputJson: string;
  subject: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
  status: WorkflowInstanceStatus;
  steps: Record<string, StepState>;
  error: string | null;
}

export interface InstanceChange {
  status: WorkflowInstanceStatus;
  steps: Record<string, StepState>;
  error: string | null;
}

/** Where reconciliation looks: a stack (null: every one; rows without a stack always), an env (strictly), the workflows this node declares. */
export interface InstanceScope {
  stack: string | null;
  env: string | null;
  workflowIds: readonly string[];
}

export const toInstance: RowMapper<WorkflowInstanceRow> = rowMapper(CycliumWorkflowInstance, { stepStates: emptyWhenAbsent });

const ENDS = `CASE WHEN $S IN ('done', 'failed', 'canceled') THEN now() END`;
const LIVE = `status IN ('running', 'blocked')`;

/** Every statement on cyclium_workflow_instances. */
@Injectable()
export class WorkflowInstanceStore {
  constructor(private readonly database: CycliumDataSource) {}

  /**
   * Inserts a new instance at version 1; false when a unique key refused it: a live instance of
   * the workflow for the same subject (in its stack and env), or the same id (an event start seen
   * twice).
   */
  async insert(client: SqlExecutor, spec: NewInstance): Promise<boolean> {
    const { rowCount } = await client.query(
      `INSERT INTO cyclium_workflow_instances
         (id, workflow_id, status, step_states, input, version, error, subject_value, source_stack, source_env, finished_at)
       VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, ${ENDS.replace('$S', '$3')})
       ON CONFLICT DO NOTHING`,
      [spec.id, spec.workflowId, spec.status, JSON.stringify(spec.steps), spec.inputJson, spec.error, spec.subject, spec.sourceStack, spec.sourceEnv],
    );
    return rowCount === 1;
  }

  /** The live instance of `workflowId` for `subject` in that stack and env, if any. */
  async live(workflowId: string, subject: string, stack: string | null, env: string | null): Promise<WorkflowInstanceRow | null> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_workflow_instances
        WHERE workflow_id = $1 AND subject_value = $2 AND ${sameAsCoalesced('source_stack', '$3')} AND ${sameAsCoalesced('source_env', '$4')}
          AND ${LIVE}`,
      [workflowId, subject, stack, env],
    );
    return rows[0] ? toInstance(rows[0]) : null;
  }

  async get(id: string): Promise<WorkflowInstanceRow | null> {
    const { rows } = await this.database.sql.query(`SELECT * FROM cyclium_workflow_instances WHERE id = $1`, [id]);
    return rows[0] ? toInstance(rows[0]) : null;
  }

  /**
   * The advance: written only while the instance is still live at the version that was read, so
   * of two nodes applying events to one instance the second re-reads, and a replayed event finds
   * its step already moved on. False when it lost.
   */
  async advance(client: SqlExecutor, id: string, version: number, change: InstanceChange): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_workflow_instances
          SET status = $3, step_states = $4, error = $5, version = version + 1, updated_at = now(), finished_at = ${ENDS.replace('$S', '$3')}
        WHERE id = $1 AND version = $2 AND ${LIVE}`,
      [id, version, change.status, JSON.stringify(change.steps), change.error],
    );
    return rowCount === 1;
  }

  /** Live instances in scope, oldest first, by keyset pages of `limit` after `afterId`. */
  async liveInScope(
    scope: InstanceScope,
    limit: number,
    after: { insertedAt: string; id: string } | null,
  ): Promise<Array<{ instance: WorkflowInstanceRow; cursorAt: string }>> {
    if (scope.workflowIds.length === 0) return [];
    const { rows } = await this.database.sql.query(
      `SELECT *, inserted_at::text AS cursor_at FROM cyclium_workflow_instances
        WHERE ${LIVE} AND workflow_id = ANY($1::text[])
          AND ${stackCovers('source_stack', '$2')}
          AND ${sameEnv('source_env', '$3')}
          AND ($4::timestamptz IS NULL OR (inserted_at, id) > ($4::timestamptz, $5::uuid))
        ORDER BY inserted_at, id
        LIMIT $6`,
      [scope.workflowIds, scope.stack, scope.env, after?.insertedAt ?? null, after?.id ?? null, limit],
    );
    return rows.map((r: Record<string, unknown>) => ({ instance: toInstance(r), cursorAt: r.cursor_at as string }));
  }
}
