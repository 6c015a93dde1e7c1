import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * One start of a rate-limited expectation (`@Expectation({ rateLimit })`), kept for as long as its
 * window lasts: the admission counts them to allow at most `limit` starts in any `periodMs`.
 */
@Entity({ name: 'cyclium_flow_starts' })
export class CycliumFlowStart {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  @Column({ name: 'expectation_id', type: 'text' })
  expectationId: string;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  /** The rate limit's partition (`rateLimit.key`), '' without a key. */
  @Column({ name: 'rate_key', type: 'text' })
  rateKey: string;

  /** By the database clock, when the admission moved the episode to running. */
  @Column({ name: 'started_at', type: 'timestamptz' })
  startedAt: Date;
}
