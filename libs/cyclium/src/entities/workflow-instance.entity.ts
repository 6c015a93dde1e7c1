import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { StepState } from './workflow-step-state.js';
import type { TraceContext } from '../primitives/trace-context.js';

/**
 * `blocked` is never written by the engine today; reconciliation and the subject index treat it as
 * live.
 */
export type WorkflowInstanceStatus = 'running' | 'blocked' | 'done' | 'failed' | 'canceled';

/** A row of `cyclium_workflow_instances`: one run of a workflow and its steps. */
@Entity({ name: 'cyclium_workflow_instances' })
export class CycliumWorkflowInstance {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workflow_id', type: 'text' })
  workflowId: string;

  @Column({ type: 'text' })
  status: WorkflowInstanceStatus;

  /**
   * Per step: status, attempts, the episode of the current attempt, its result (small) and error.
   */
  @Column({ name: 'step_states', type: 'jsonb' })
  stepStates: Record<string, StepState>;

  @Column({ type: 'jsonb' })
  input: unknown;

  /** Bumped by every advance; each advance is conditional on the version it read. */
  @Column({ type: 'integer' })
  version: number;

  /** Why the instance failed or was canceled. */
  @Column({ type: 'text', nullable: true })
  error: string | null;

  @Column({ name: 'subject_value', type: 'text', nullable: true })
  subjectValue: string | null;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;

  @Column({ name: 'finished_at', type: 'timestamptz', nullable: true })
  finishedAt: Date | null;

  /**
   * `<keyId>:<HMAC>` over the row's meaningful fields with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;

  /**
   * The W3C trace context the instance was started in: its step episodes continue it
   * (`{ traceparent, tracestate? }`); null outside any trace.
   */
  @Column({ name: 'trace_context', type: 'jsonb', nullable: true })
  traceContext: TraceContext | null;
}
