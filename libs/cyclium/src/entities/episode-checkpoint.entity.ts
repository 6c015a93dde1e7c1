import { Column, Entity, PrimaryColumn } from 'typeorm';

/** A row of `cyclium_episode_checkpoints`: a step result an episode recorded. */
@Entity({ name: 'cyclium_episode_checkpoints' })
export class CycliumEpisodeCheckpoint {
  @PrimaryColumn({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  @PrimaryColumn({ name: 'checkpoint_no', type: 'integer' })
  checkpointNo: number;

  @Column({ type: 'text', nullable: true })
  phase: string | null;

  @Column({ name: 'schema_version', type: 'integer' })
  schemaVersion: number;

  @Column({ type: 'jsonb' })
  state: unknown;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  /**
   * `<keyId>:<HMAC>` over the row's meaningful fields with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;
}
