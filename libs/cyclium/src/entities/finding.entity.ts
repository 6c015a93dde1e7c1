import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** Whether a finding stands (`active`) or no longer does (`cleared`, `superseded`). */
export type FindingStatus = 'active' | 'cleared' | 'superseded';

/** A row of `cyclium_findings`: a finding an expectation raised for a key. */
@Entity({ name: 'cyclium_findings' })
export class CycliumFinding {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  @Column({ name: 'expectation_id', type: 'text', nullable: true })
  expectationId: string | null;

  @Column({ name: 'finding_key', type: 'text' })
  findingKey: string;

  @Column({ type: 'text' })
  status: FindingStatus;

  @Column({ type: 'text', nullable: true })
  class: string | null;

  @Column({ type: 'text', nullable: true })
  severity: string | null;

  @Column({ type: 'text', nullable: true })
  subject: string | null;

  @Column({ type: 'text', nullable: true })
  summary: string | null;

  @Column({ type: 'jsonb', nullable: true })
  evidence: unknown;

  @Column({ name: 'raised_by_episode_id', type: 'uuid', nullable: true })
  raisedByEpisodeId: string | null;

  @Column({ name: 'cleared_by_episode_id', type: 'uuid', nullable: true })
  clearedByEpisodeId: string | null;

  @Column({ type: 'text', nullable: true })
  env: string | null;

  @Column({ name: 'raised_at', type: 'timestamptz' })
  raisedAt: Date;

  @Column({ name: 'cleared_at', type: 'timestamptz', nullable: true })
  clearedAt: Date | null;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
