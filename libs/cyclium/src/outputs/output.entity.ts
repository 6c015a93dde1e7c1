import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

export type OutputStatus = 'pending' | 'delivered' | 'failed';

@Entity({ name: 'cyclium_outputs' })
export class CycliumOutput {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  @Column({ type: 'text' })
  type: string;

  @Column({ name: 'dedupe_key', type: 'text' })
  dedupeKey: string;

  @Column({ type: 'text' })
  status: OutputStatus;

  @Column({ type: 'jsonb', nullable: true })
  payload: unknown;

  @Column({ name: 'delivered_ref', type: 'jsonb', nullable: true })
  deliveredRef: unknown;

  @Column({ type: 'text', nullable: true })
  error: string | null;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'delivered_at', type: 'timestamptz', nullable: true })
  deliveredAt: Date | null;
}
