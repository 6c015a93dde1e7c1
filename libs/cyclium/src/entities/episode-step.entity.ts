import { Column, Entity, PrimaryColumn } from 'typeorm';

/** One journal entry: a finished step, or a marker such as `interrupted` or `resumed`. */
@Entity({ name: 'cyclium_episode_steps' })
export class CycliumEpisodeStep {
  @PrimaryColumn({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  @PrimaryColumn({ name: 'step_no', type: 'integer' })
  stepNo: number;

  @Column({ type: 'text' })
  kind: string;

  @Column({ type: 'text' })
  name: string;

  @Column({ name: 'result_ref', type: 'jsonb', nullable: true })
  resultRef: unknown;

  @Column({ name: 'error_class', type: 'text', nullable: true })
  errorClass: string | null;

  @Column({ name: 'duration_ms', type: 'integer', nullable: true })
  durationMs: number | null;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
