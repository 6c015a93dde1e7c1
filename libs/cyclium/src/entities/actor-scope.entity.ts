import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * The stored description of an actor in one stack and env, read by recovery when no compiled actor
 * is at hand.
 */
@Entity({ name: 'cyclium_actor_scopes' })
export class CycliumActorScope {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  /** One entry per expectation, e.g. `[{ "id": "check", "recovery_policy": "restart" }]`. */
  @Column({ type: 'jsonb' })
  expectations: Array<{ id: string; recovery_policy?: 'restart' | 'fail'; [key: string]: unknown }>;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
