import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * An actor paused cluster-wide in one stack and env (ActorPauses): its nodes start nothing of it
 * until the row is deleted (resumed).
 */
@Entity({ name: 'cyclium_actor_pauses' })
export class CycliumActorPause {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  /** NULL: no stack (the single-stack default). */
  @Column({ type: 'text', nullable: true })
  stack: string | null;

  /** NULL: the default env. */
  @Column({ type: 'text', nullable: true })
  env: string | null;

  @Column({ name: 'paused_at', type: 'timestamptz' })
  pausedAt: Date;

  /** The node that paused it. */
  @Column({ name: 'paused_by', type: 'text', nullable: true })
  pausedBy: string | null;

  @Column({ type: 'text', nullable: true })
  reason: string | null;
}
