import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** Where a trigger request (`CycliumTriggerRequest`) is in its life. */
export type TriggerRequestStatus =
  'pending' | 'scheduled' | 'claimed' | 'completed' | 'expired' | 'failed';

/** An episode a trigger-only node deferred to the full nodes. */
@Entity({ name: 'cyclium_trigger_requests' })
export class CycliumTriggerRequest {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  @Column({ name: 'expectation_id', type: 'text' })
  expectationId: string;

  @Column({ name: 'source_node', type: 'text' })
  sourceNode: string;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ type: 'text' })
  status: TriggerRequestStatus;

  @Column({ type: 'jsonb' })
  opts: Record<string, unknown>;

  @Column({ name: 'claimed_by', type: 'text', nullable: true })
  claimedBy: string | null;

  @Column({ name: 'claimed_at', type: 'timestamptz', nullable: true })
  claimedAt: Date | null;

  @Column({ type: 'text', nullable: true })
  error: string | null;

  /** Not taken before this (a workflow step's retry backing off); null: at once. */
  @Column({ name: 'not_before', type: 'timestamptz', nullable: true })
  notBefore: Date | null;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'completed_at', type: 'timestamptz', nullable: true })
  completedAt: Date | null;

  /**
   * `<keyId>:<HMAC>` over the row's meaningful fields with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;
}
