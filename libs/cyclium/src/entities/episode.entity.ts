import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { WaitingFor } from './waiting-for.js';

/** Every status an episode row can have (the table's check constraint). */
export const EPISODE_STATUSES = [
  'queued',
  'throttled',
  'deferred',
  'waiting',
  'running',
  'blocked',
  'done',
  'partially_failed',
  'failed',
  'canceled',
] as const;

/** Where an episode is in its life (one of `EPISODE_STATUSES`). */
export type EpisodeStatus = (typeof EPISODE_STATUSES)[number];

/** A row of `cyclium_episodes`: one episode, its actor, trigger, status, owner node and times. */
@Entity({ name: 'cyclium_episodes' })
export class CycliumEpisode {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'actor_id', type: 'text' })
  actorId: string;

  @Column({ name: 'expectation_id', type: 'text' })
  expectationId: string;

  @Column({ name: 'trigger_type', type: 'text' })
  triggerType: string;

  @Column({ name: 'trigger_ref', type: 'jsonb' })
  triggerRef: Record<string, unknown>;

  @Column({ name: 'dedupe_key', type: 'text', nullable: true })
  dedupeKey: string | null;

  @Column({ type: 'text' })
  status: EpisodeStatus;

  @Column({ type: 'text', nullable: true })
  phase: string | null;

  @Column({ type: 'integer' })
  attempts: number;

  @Column({ name: 'max_attempts', type: 'integer' })
  maxAttempts: number;

  /**
   * Failed attempts so far that a retry policy retried (the episode is `waiting`, or ran again).
   */
  @Column({ type: 'integer', default: 0 })
  retries: number;

  @Column({ name: 'error_class', type: 'text', nullable: true })
  errorClass: string | null;

  @Column({ name: 'error_detail', type: 'text', nullable: true })
  errorDetail: string | null;

  @Column({ type: 'text', nullable: true })
  summary: string | null;

  @Column({ type: 'jsonb', nullable: true })
  classification: unknown;

  @Column({ name: 'owner_node', type: 'text', nullable: true })
  ownerNode: string | null;

  @Column({ name: 'workflow_instance_id', type: 'uuid', nullable: true })
  workflowInstanceId: string | null;

  @Column({ name: 'workflow_step_id', type: 'text', nullable: true })
  workflowStepId: string | null;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ name: 'started_at', type: 'timestamptz', nullable: true })
  startedAt: Date | null;

  @Column({ name: 'finished_at', type: 'timestamptz', nullable: true })
  finishedAt: Date | null;

  @Column({ name: 'queued_at', type: 'timestamptz', nullable: true })
  queuedAt: Date | null;

  @Column({ name: 'archived_at', type: 'timestamptz', nullable: true })
  archivedAt: Date | null;

  /** Set by `Episodes.cancel`: the running node stops before its next step. */
  @Column({ name: 'cancel_requested_at', type: 'timestamptz', nullable: true })
  cancelRequestedAt: Date | null;

  @Column({ name: 'inserted_at', type: 'timestamptz' })
  insertedAt: Date;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;

  /**
   * What a `waiting` episode waits for beyond a backoff or a sleep (a signal, an event, children),
   * with its deadline; null otherwise.
   */
  @Column({ name: 'waiting_for', type: 'jsonb', nullable: true })
  waitingFor: WaitingFor | null;

  /** What the episode's method returned as `Convergence.result`, once it converged. */
  @Column({ type: 'jsonb', nullable: true })
  result: unknown;

  /**
   * The partition of a limited expectation's episode (`concurrency.key`, else `rateLimit.key`, ''
   * without one), stored when it was triggered; null for an expectation without limits.
   */
  @Column({ name: 'flow_key', type: 'text', nullable: true })
  flowKey: string | null;

  /** The rate limit's partition (`rateLimit.key`, '' without one); null without a rate limit. */
  @Column({ name: 'rate_key', type: 'text', nullable: true })
  rateKey: string | null;

  /** Orders the `throttled` rows of an expectation: higher first, then oldest. */
  @Column({ type: 'integer', default: 0 })
  priority: number;

  /**
   * The `@Expectation({ version })` the episode started on; null when it has not started, or
   * started on code without one.
   */
  @Column({ type: 'text', nullable: true })
  version: string | null;

  /**
   * `<keyId>:<HMAC>` over what decides what runs (actor, expectation, trigger, scope, attempts)
   * with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;
}
