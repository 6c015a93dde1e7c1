import { Column, Entity, PrimaryColumn } from 'typeorm';

/**
 * An actor's description as nodes before 0.2 stored it, by actor alone; read only when
 * cyclium_actor_scopes has no row for the scope.
 */
@Entity({ name: 'cyclium_actor_definitions' })
export class CycliumActorDefinition {
  @PrimaryColumn({ name: 'actor_id', type: 'text' })
  actorId: string;

  /** One entry per expectation, e.g. `[{ "id": "check", "recovery_policy": "restart" }]`. */
  @Column({ type: 'jsonb' })
  expectations: Array<{ id: string; recovery_policy?: 'restart' | 'fail'; [key: string]: unknown }>;

  @Column({ type: 'boolean' })
  enabled: boolean;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
