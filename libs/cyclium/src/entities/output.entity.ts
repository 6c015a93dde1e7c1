import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** Where an output's delivery is: waiting (`pending`), `delivered` or `failed`. */
export type OutputStatus = 'pending' | 'delivered' | 'failed';

/** A row of `cyclium_outputs`: an output an episode left for delivery (the outbox). */
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

  /** The stack and env of the episode that wrote it. */
  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ name: 'delivered_at', type: 'timestamptz', nullable: true })
  deliveredAt: Date | null;

  /** Delivery attempts started so far (a drain gives back the one it interrupted). */
  @Column({ type: 'int' })
  attempts: number;

  /**
   * When the row is next due, by the database clock: the backoff's end after a failure, the end
   * of the lease while an attempt runs (so an attempt whose node died is due again then).
   */
  @Column({ name: 'next_attempt_at', type: 'timestamptz' })
  nextAttemptAt: Date;

  /** The node whose attempt runs now; null between attempts. */
  @Column({ name: 'lease_owner', type: 'text', nullable: true })
  leaseOwner: string | null;
}
