import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

export type WorkflowInstanceStatus = 'running' | 'blocked' | 'done' | 'failed' | 'canceled';

@Entity({ name: 'cyclium_workflow_instances' })
export class CycliumWorkflowInstance {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workflow_id', type: 'text' })
  workflowId: string;

  @Column({ type: 'text' })
  status: WorkflowInstanceStatus;

  @Column({ name: 'step_states', type: 'jsonb' })
  stepStates: Record<string, unknown>;

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
}
