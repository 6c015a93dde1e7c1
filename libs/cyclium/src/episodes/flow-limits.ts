import { createHash } from 'node:crypto';

/**
 * Flow control of an expectation: how many of its episodes run at once across the cluster, how
 * often they start, and in which order the ones over those limits start. Declared on
 * `@Expectation`; enforced in the database (cyclium_flow_admit).
 */

/** Derives a partition from the trigger's payload; evaluated once, when triggered. */
export type FlowKeyFn<P = unknown> = (payload: P) => string | number | null | undefined;

/**
 * At most `limit` episodes of the expectation running at once across every node of the env (per
 * `key` when given); waiting and sleeping episodes do not count. With a key, `total` caps all
 * keys together.
 */
export interface ConcurrencyLimit<P = unknown> {
  limit: number;
  /** The partition of a payload (method syntax, so a typed payload parameter is accepted). */
  key?(payload: P): ReturnType<FlowKeyFn>;
  total?: number;
}

/**
 * At most `limit` starts in any window of `periodMs` (a sliding window, by the database clock)
 * across every node of the env, per `key` when given. Every move to running counts: a first start,
 * a wake-up from a sleep, a wait or a backoff.
 */
export interface RateLimit<P = unknown> {
  limit: number;
  periodMs: number;
  /** The partition of a payload (method syntax, so a typed payload parameter is accepted). */
  key?(payload: P): ReturnType<FlowKeyFn>;
}

/** The flow options of an expectation (the fields of `@Expectation` they come from). */
export interface FlowOptions {
  concurrency?: ConcurrencyLimit;
  rateLimit?: RateLimit;
  priority?: number;
}

/** The longest key stored: a longer one is hashed into this many characters. */
const MAX_KEY_CHARS = 200;
/** Priorities are whole numbers in this range (both ends included). */
export const PRIORITY_RANGE = [-1_000_000, 1_000_000] as const;

/** What a limited episode stores when it is triggered. */
export interface EpisodeFlow {
  /** Its concurrency partition ('' for none); the rate key when only a rate limit is declared. */
  key: string;
  /** Its rate partition ('' for none); null without a rate limit. */
  rateKey: string | null;
  priority: number;
}

/** The limits the admission enforces for one expectation; null fields are not limited. */
export interface FlowLimits {
  limit: number | null;
  total: number | null;
  rate: number | null;
  periodMs: number | null;
}

/** True when the expectation declares a concurrency or rate limit. */
export function isLimited(options: FlowOptions): boolean {
  return options.concurrency !== undefined || options.rateLimit !== undefined;
}

/** The limits of a limited expectation, as the admission takes them. */
export function limitsOf(options: FlowOptions): FlowLimits {
  const { concurrency, rateLimit } = options;
  return {
    limit: concurrency?.limit ?? null,
    total: concurrency?.key ? (concurrency.total ?? null) : null,
    rate: rateLimit?.limit ?? null,
    periodMs: rateLimit?.periodMs ?? null,
  };
}

/**
 * The partition and priority an episode of a limited expectation stores, from its trigger (the
 * payload, and the priority `Episodes.trigger` gave it); null for an expectation without limits.
 * A key function that throws, or answers something other than a string or a number, puts the
 * episode in the '' partition: the trigger is accepted (rule 9), and the log says why.
 */
export function flowOf(
  options: FlowOptions,
  trigger: { payload: unknown; priority?: number },
  onKeyError: (field: 'concurrency.key' | 'rateLimit.key', error: unknown) => void,
): EpisodeFlow | null {
  if (!isLimited(options)) return null;
  const keyOf = (field: 'concurrency.key' | 'rateLimit.key', limit: { key?: FlowKeyFn }) => {
    if (!limit.key) return '';
    try {
      const key = limit.key(trigger.payload);
      if (key === null || key === undefined) return '';
      if (typeof key !== 'string' && typeof key !== 'number')
        throw new TypeError(`answered ${typeof key}, not a string or a number`);
      return shortKey(String(key));
    } catch (error) {
      onKeyError(field, error);
      return '';
    }
  };
  const rateKey = options.rateLimit ? keyOf('rateLimit.key', options.rateLimit) : null;
  const key = options.concurrency ? keyOf('concurrency.key', options.concurrency) : (rateKey ?? '');
  return { key, rateKey, priority: trigger.priority ?? options.priority ?? 0 };
}

/** Keys are stored as given up to MAX_KEY_CHARS; a longer one by a digest of it. */
function shortKey(key: string): string {
  if (key.length <= MAX_KEY_CHARS) return key;
  return `sha256:${createHash('sha256').update(key).digest('hex')}`;
}

/**
 * What is wrong with an expectation's flow options (for ActorDefinitionError), or null when
 * nothing is.
 */
export function flowProblem(options: FlowOptions): string | null {
  const whole = (v: unknown, min: number) => Number.isInteger(v) && (v as number) >= min;
  const { concurrency, rateLimit, priority } = options;
  if (concurrency !== undefined) {
    if (typeof concurrency !== 'object' || concurrency === null)
      return 'concurrency must be { limit, key?, total? }';
    if (!whole(concurrency.limit, 1))
      return `concurrency.limit must be a whole number >= 1 (got ${String(concurrency.limit)})`;
    if (concurrency.key !== undefined && typeof concurrency.key !== 'function')
      return 'concurrency.key must be a function (payload) => string | number';
    if (concurrency.total !== undefined) {
      if (!concurrency.key) return 'concurrency.total needs concurrency.key (it caps all keys)';
      if (!whole(concurrency.total, 1))
        return `concurrency.total must be a whole number >= 1 (got ${String(concurrency.total)})`;
    }
  }
  if (rateLimit !== undefined) {
    if (typeof rateLimit !== 'object' || rateLimit === null)
      return 'rateLimit must be { limit, periodMs, key? }';
    if (!whole(rateLimit.limit, 1))
      return `rateLimit.limit must be a whole number >= 1 (got ${String(rateLimit.limit)})`;
    if (!whole(rateLimit.periodMs, 1) || rateLimit.periodMs > 86_400_000)
      return (
        `rateLimit.periodMs must be a whole number of milliseconds from 1 to 86400000 (got ` +
        `${String(rateLimit.periodMs)})`
      );
    if (rateLimit.key !== undefined && typeof rateLimit.key !== 'function')
      return 'rateLimit.key must be a function (payload) => string | number';
  }
  if (priority !== undefined) return priorityProblem('priority', priority);
  return null;
}

/** What is wrong with a priority named `field`, or null. */
export function priorityProblem(field: string, priority: unknown): string | null {
  const [min, max] = PRIORITY_RANGE;
  return Number.isInteger(priority) && (priority as number) >= min && (priority as number) <= max
    ? null
    : `${field} must be a whole number from ${min} to ${max} (got ${String(priority)})`;
}
