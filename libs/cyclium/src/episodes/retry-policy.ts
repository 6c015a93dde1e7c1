import type { EpisodeRow, RetryPolicy } from './episode-context.interface.js';

const DEFAULT_BACKOFF = { initialMs: 1_000, factor: 2, maxMs: 300_000 };

/** An expectation's retry options, as EpisodeEndings reads them. */
export interface RetryOptions {
  retry?: RetryPolicy;
  retryable?: (error: unknown) => boolean;
}

/** What is wrong with a retry policy, naming the field, or null when it is sound. */
export function retryPolicyProblem(policy: unknown): string | null {
  if (typeof policy !== 'object' || policy === null)
    return 'retry must be an object { attempts, backoff?, jitter? }';
  const { attempts, backoff, jitter } = policy as Partial<RetryPolicy>;
  if (!(Number.isInteger(attempts) && (attempts as number) >= 2))
    return 'retry.attempts must be a whole number >= 2 (runs in all, the first included)';
  if (backoff !== undefined) {
    if (typeof backoff !== 'object' || backoff === null)
      return 'retry.backoff must be an object { initialMs?, factor?, maxMs? }';
    for (const field of ['initialMs', 'maxMs'] as const) {
      const value = backoff[field];
      if (value !== undefined && !(Number.isInteger(value) && value >= 0))
        return `retry.backoff.${field} must be a whole number of milliseconds >= 0`;
    }
    if (
      backoff.factor !== undefined &&
      !(
        typeof backoff.factor === 'number' &&
        Number.isFinite(backoff.factor) &&
        backoff.factor >= 1
      )
    ) {
      return 'retry.backoff.factor must be a number >= 1';
    }
    if (
      backoff.initialMs !== undefined &&
      backoff.maxMs !== undefined &&
      backoff.maxMs < backoff.initialMs
    )
      return 'retry.backoff.maxMs must be >= initialMs';
  }
  if (jitter !== undefined && !(typeof jitter === 'number' && jitter >= 0 && jitter <= 1))
    return 'retry.jitter must be a number between 0 and 1';
  return null;
}

/**
 * The backoff before the attempt after `retriesSoFar` failed ones: initialMs × factor^retries, at
 * most maxMs, plus up to `jitter` of it.
 */
export function retryDelayMs(
  policy: RetryPolicy,
  retriesSoFar: number,
  random: () => number = Math.random,
): number {
  const { initialMs, factor, maxMs } = { ...DEFAULT_BACKOFF, ...policy.backoff };
  const base = Math.min(maxMs, initialMs * factor ** retriesSoFar);
  return Math.round(base * (1 + (policy.jitter ?? 0) * random()));
}

/**
 * The retry options a run of `episode` goes by: the `retry` its trigger carries (TriggerOptions),
 * `false` for none, over the expectation's; the expectation's `retryable` hook either way. A stored
 * override that is not a sound policy (a row edited by hand) counts as none given: `problem` says
 * why.
 */
export function retryOptionsFor(
  episode: Pick<EpisodeRow, 'triggerRef'>,
  expectation: RetryOptions | undefined,
): { options: RetryOptions | undefined; problem?: string } {
  const override = (episode.triggerRef as { retry?: unknown } | null)?.retry;
  if (override === undefined) return { options: expectation };
  if (override === false) return { options: undefined };
  const problem = retryPolicyProblem(override);
  if (problem) return { options: expectation, problem: `its trigger's ${problem}` };
  return { options: { retry: override as RetryPolicy, retryable: expectation?.retryable } };
}
