import { Reflector } from '@nestjs/core';
import type { RecoveryPolicy } from '../options/cyclium-options.interface.js';
import type { EpisodeBudget, RetryPolicy } from '../episodes/episode-context.interface.js';
import type { ConcurrencyLimit, RateLimit } from '../episodes/flow-limits.js';

/** A payload value to match: equal to it, or one of `in`. */
export type FilterValue =
  string | number | boolean | null | { in: Array<string | number | boolean | null> };

/**
 * What a schedule does, at boot, with the buckets that fell while no node ran it (a whole-cluster
 * stop): `none` skips them, `last` runs the latest one, `all` runs each once (at most 1,000, the
 * latest).
 */
export type CatchUp = 'none' | 'last' | 'all';

/**
 * Each object trigger names exactly one kind: mixing `event` with `every` or `cron` is a compile
 * error.
 */
export type Trigger =
  /** Bus events of this type whose payload matches `filter` (dotted paths allowed as keys). */
  | { event: string; filter?: Record<string, FilterValue>; every?: never; cron?: never }
  /**
   * Every interval (`'30s'`, `'5m'`, `'1h'`, `'1d'` or milliseconds), aligned to wall-clock
   * buckets.
   */
  | { every: string | number; catchUp?: CatchUp; event?: never; filter?: never; cron?: never }
  /** A cron expression, evaluated in UTC. */
  | { cron: string; catchUp?: CatchUp; event?: never; filter?: never; every?: never }
  /** Only `Episodes.trigger(...)`. */
  | 'manual'
  /** Only started by a workflow. */
  | 'workflow';

/** Options of `@Expectation`: its trigger, and how its episodes recover, retry and are budgeted. */
export interface ExpectationOptions {
  /** Default: the method name. */
  id?: string;
  trigger: Trigger;
  /** What recovery does with an orphaned episode. Default `fail`. */
  recoveryPolicy?: RecoveryPolicy;
  /** Restarts before recovery fails the episode instead. Default 3. */
  maxAttempts?: number;
  /** Payload path that names the subject, for per-subject debounce and cooldown. */
  subjectKey?: string;
  /** Trailing-edge debounce per subject: run once the subject has been quiet this long. */
  debounceMs?: number;
  /** After a run for a subject, ignore its triggers for this long. */
  cooldownMs?: number;
  /** Stop before the next step once either is reached; the episode fails with `budget_exceeded`. */
  budget?: EpisodeBudget;
  /**
   * Retries an episode whose method throws (not one canceled, over budget or failed by the
   * library). Default: none.
   */
  retry?: RetryPolicy;
  /**
   * With `retry`: false for an error not worth retrying (the episode fails at once). Default: every
   * error is.
   */
  retryable?: (error: unknown) => boolean;
  /**
   * Every trigger of this expectation runs this long after it arrives (a trigger's own `delayMs` or
   * `runAt` wins): the episode waits `deferred`, as a row any node hosting the actor starts when
   * due.
   */
  delayMs?: number;
  /**
   * At most `limit` of its episodes running at once across every node of the env, per `key` (a
   * partition of the trigger's payload, evaluated once when triggered) when given, and `total`
   * across keys. Over it, an episode waits `throttled`, as a row any node hosting the expectation
   * starts as soon as the limits allow. Default: no limit beyond each node's
   * `maxConcurrentEpisodes`.
   */
  concurrency?: ConcurrencyLimit;
  /**
   * At most `limit` starts in any window of `periodMs` across the env (sliding, by the database
   * clock), per `key` when given; episodes over it wait `throttled`.
   */
  rateLimit?: RateLimit;
  /**
   * Orders the `throttled` episodes of a limited expectation: higher first, then oldest (a
   * trigger's own `priority` wins). Default 0. Without `concurrency` or `rateLimit` nothing waits
   * on it.
   */
  priority?: number;
  /**
   * The version of this expectation's code. Each episode records the version it started on, and
   * only a node hosting that version (or one that `accepts` it) resumes, retries, wakes or restarts
   * it; elsewhere it waits, visibly, for such a node. Default: none (any node hosting the
   * expectation runs its episodes).
   */
  version?: string;
  /** Versions whose in-flight episodes this code can take over (their journals replay on it). */
  accepts?: readonly string[];
}

/** Marks an actor method as an expectation: what it does, and what triggers it. */
export const Expectation = Reflector.createDecorator<ExpectationOptions>();
