import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import {
  CycliumWorkflowInstance,
  type WorkflowInstanceStatus,
} from '../entities/workflow-instance.entity.js';
import { emptyWhenAbsent, rowMapper, type RowMapper } from '../entities/row-mapper.js';
import type { StepState } from '../entities/workflow-step-state.js';
import { sameAsCoalesced, sameEnv, stackCovers } from '../scope/scope-predicates.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { signInPages, type CutoverScope } from '../integrity/unsigned-pages.js';
import { asTraceContext, type TraceContext } from '../primitives/trace-context.js';

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
  /** Where the start was made (activeTraceContext, or the starting event's); absent: none. */
  traceContext?: TraceContext;
}

export interface InstanceChange {
  status: WorkflowInstanceStatus;
  steps: Record<string, StepState>;
  error: string | null;
}

/**
 * Where reconciliation looks: a stack (null: every one; rows without a stack always), an env
 * (strictly), the workflows this node declares.
 */
export interface InstanceScope {
  stack: string | null;
  env: string | null;
  workflowIds: readonly string[];
}

export const toInstance: RowMapper<WorkflowInstanceRow> = rowMapper(CycliumWorkflowInstance, {
  stepStates: emptyWhenAbsent,
  traceContext: (value) => asTraceContext(value) ?? null,
});

const ENDS = `CASE WHEN $S IN ('done', 'failed', 'canceled') THEN now() END`;
const LIVE = `status IN ('running', 'blocked')`;

/** An instance as its signature covers it: step states and input as jsonb gives them back. */
type SignedInstance = Pick<
  WorkflowInstanceRow,
  | 'id'
  | 'workflowId'
  | 'version'
  | 'status'
  | 'stepStates'
  | 'input'
  | 'subjectValue'
  | 'sourceStack'
  | 'sourceEnv'
>;

function instanceFields(i: SignedInstance): unknown[] {
  return [
    i.id,
    i.workflowId,
    i.version,
    i.status,
    i.stepStates,
    i.input,
    i.subjectValue,
    i.sourceStack,
    i.sourceEnv,
  ];
}

/** Every statement on cyclium_workflow_instances. */
@Injectable()
export class WorkflowInstanceStore {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly signer: RowSigner,
  ) {}

  /**
   * The signature of the instance as it will be read back (a JSON round trip of its step states),
   * or null without the option.
   */
  private signatureOf(
    instance: Omit<SignedInstance, 'stepStates'>,
    stepsJson: string,
  ): string | null {
    if (!this.signer.enabled) return null;
    return this.signer.sign(
      'workflow_instance',
      instanceFields({
        ...instance,
        stepStates: JSON.parse(stepsJson) as SignedInstance['stepStates'],
      }),
    );
  }

  /**
   * Inserts a new instance at version 1; false when a unique key refused it: a live instance of
   * the workflow for the same subject (in its stack and env), or the same id (an event start seen
   * twice).
   */
  async insert(client: SqlExecutor, spec: NewInstance): Promise<boolean> {
    const stepsJson = JSON.stringify(spec.steps);
    const signature = this.signer.enabled
      ? this.signatureOf(
          {
            ...spec,
            version: 1,
            input: JSON.parse(spec.inputJson) as unknown,
            subjectValue: spec.subject,
          },
          stepsJson,
        )
      : null;
    const { rowCount } = await client.query(
      `INSERT INTO cyclium_workflow_instances
         (id, workflow_id, status, step_states, input, version, error, subject_value, source_stack,
          source_env, finished_at, signature, trace_context)
       VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, ${ENDS.replace('$S', '$3')}, $10, $11)
       ON CONFLICT DO NOTHING`,
      [
        spec.id,
        spec.workflowId,
        spec.status,
        stepsJson,
        spec.inputJson,
        spec.error,
        spec.subject,
        spec.sourceStack,
        spec.sourceEnv,
        signature,
        spec.traceContext === undefined ? null : JSON.stringify(spec.traceContext),
      ],
    );
    return rowCount === 1;
  }

  /**
   * Whether a live instance is as a node of this deployment last wrote it (the `integrity` option;
   * always true without it): its workflow, version, status and step states, input, subject and
   * scope. An unsigned one passes only before the cut-over (RowSigner.accepts).
   */
  verify(instance: WorkflowInstanceRow): boolean {
    if (!this.signer.enabled) return true;
    return this.signer.accepts('workflow_instance', instanceFields(instance), instance.signature);
  }

  /**
   * At the `integrity` cut-over, inside its transaction: signs the unsigned live instances of
   * `scope`, locked until the cut-over commits; returns how many.
   */
  async signUnsigned(client: SqlExecutor, scope: CutoverScope): Promise<number> {
    const read = async (after: WorkflowInstanceRow | null, limit: number) => {
      const { rows } = await client.query(
        `SELECT * FROM cyclium_workflow_instances
          WHERE signature IS NULL AND ${LIVE} AND ${stackCovers('source_stack', '$1::text')}
            AND ${sameEnv('source_env', '$2::text')} AND ($3::uuid IS NULL OR id > $3::uuid)
          ORDER BY id LIMIT $4 FOR UPDATE`,
        [scope.stack, scope.env, after?.id ?? null, limit],
      );
      return rows.map(toInstance);
    };
    const sign = (i: WorkflowInstanceRow) =>
      this.signer.sign('workflow_instance', instanceFields(i));
    const write = (page: WorkflowInstanceRow[]) =>
      client.query(
        `UPDATE cyclium_workflow_instances w SET signature = v.signature
           FROM unnest($1::uuid[], $2::text[]) AS v (id, signature) WHERE w.id = v.id
             AND w.signature IS NULL`,
        [page.map((i) => i.id), page.map(sign)],
      );
    return signInPages(read, write);
  }

  /**
   * Ends an instance that failed verification, without acting on anything in it; false when it
   * moved on meanwhile. The signature read is part of what moved: an `integrity` cut-over that
   * signed the instance since it was read unsigned leaves it to be judged again on its next read.
   */
  async failTampered(
    instance: Pick<WorkflowInstanceRow, 'id' | 'version' | 'signature'>,
    reason: string,
  ): Promise<boolean> {
    const { rowCount } = await this.database.sql.query(
      `UPDATE cyclium_workflow_instances
          SET status = 'failed', error = $3, version = version + 1, updated_at = now(),
              finished_at = now(), signature = NULL
        WHERE id = $1 AND version = $2 AND signature IS NOT DISTINCT FROM $4 AND ${LIVE}`,
      [instance.id, instance.version, reason, instance.signature],
    );
    return rowCount === 1;
  }

  /** The live instance of `workflowId` for `subject` in that stack and env, if any. */
  async live(
    workflowId: string,
    subject: string,
    stack: string | null,
    env: string | null,
  ): Promise<WorkflowInstanceRow | null> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_workflow_instances
        WHERE workflow_id = $1 AND subject_value = $2 AND ${sameAsCoalesced('source_stack', '$3')}
          AND ${sameAsCoalesced('source_env', '$4')}
          AND ${LIVE}`,
      [workflowId, subject, stack, env],
    );
    return rows[0] ? toInstance(rows[0]) : null;
  }

  async get(id: string): Promise<WorkflowInstanceRow | null> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_workflow_instances WHERE id = $1`,
      [id],
    );
    return rows[0] ? toInstance(rows[0]) : null;
  }

  /**
   * The advance: written only while the instance is still live at the version that was read, so
   * of two nodes applying events to one instance the second re-reads, and a replayed event finds
   * its step already moved on. False when it lost.
   */
  async advance(
    client: SqlExecutor,
    instance: WorkflowInstanceRow,
    change: InstanceChange,
  ): Promise<boolean> {
    const stepsJson = JSON.stringify(change.steps);
    const signature = this.signatureOf(
      { ...instance, version: instance.version + 1, status: change.status },
      stepsJson,
    );
    const { rowCount } = await client.query(
      `UPDATE cyclium_workflow_instances
          SET status = $3, step_states = $4, error = $5, version = version + 1, updated_at = now(),
              finished_at = ${ENDS.replace('$S', '$3')},
              signature = $6
        WHERE id = $1 AND version = $2 AND ${LIVE}`,
      [instance.id, instance.version, change.status, stepsJson, change.error, signature],
    );
    return rowCount === 1;
  }

  /** Live instances in scope, oldest first, by keyset pages of `limit` after `afterId`. */
  /** The newest instances, optionally of one status: the operations page's list. */
  async recent(
    status: WorkflowInstanceRow['status'] | undefined,
    limit: number,
  ): Promise<WorkflowInstanceRow[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_workflow_instances WHERE $1::text IS NULL OR status = $1 ORDER BY ` +
        `inserted_at DESC, id DESC LIMIT $2`,
      [status ?? null, limit],
    );
    return rows.map(toInstance);
  }

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
      [
        scope.workflowIds,
        scope.stack,
        scope.env,
        after?.insertedAt ?? null,
        after?.id ?? null,
        limit,
      ],
    );
    return rows.map((r: Record<string, unknown>) => ({
      instance: toInstance(r),
      cursorAt: r.cursor_at as string,
    }));
  }
}
