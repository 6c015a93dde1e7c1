import { toJsonb } from '../sql/jsonb.js';
import type { RetryPolicy } from './episode-context.interface.js';
import { InvalidTriggerError } from './episode-errors.js';
import { retryPolicyProblem } from './retry-policy.js';
import { priorityProblem } from './flow-limits.js';

/**
 * The longest manual `dedupeKey`, in UTF-8 bytes. The key (plus `:<env>`) is a unique index entry,
 * and PostgreSQL refuses a btree entry past about 2,700 bytes with an error only at write time.
 */
export const MAX_DEDUPE_KEY_BYTES = 1_000;

/** When a trigger runs, if not now: after `ms` by the database clock, or at `at`. */
export type TriggerDelay = { ms: number } | { at: Date };

/**
 * The delay a trigger asked for (`delayMs` or `runAt`, not both); null to run now (a `delayMs` of
 * 0), undefined when it asked for none (the Dispatcher applies the expectation's). A `runAt` in the
 * past runs at the next poll.
 */
export function triggerDelay(
  what: string,
  asked: { delayMs?: unknown; runAt?: unknown },
): TriggerDelay | null | undefined {
  const { delayMs, runAt } = asked;
  if (delayMs !== undefined && runAt !== undefined)
    throw new InvalidTriggerError('runAt', `${what}: give delayMs or runAt, not both`);
  if (delayMs !== undefined) {
    if (!(typeof delayMs === 'number' && Number.isSafeInteger(delayMs) && delayMs >= 0)) {
      throw new InvalidTriggerError(
        'delayMs',
        `${what}: delayMs must be a whole number of milliseconds >= 0 (got ` +
          `${JSON.stringify(delayMs)})`,
      );
    }
    return delayMs > 0 ? { ms: delayMs } : null;
  }
  if (runAt !== undefined) {
    if (!(runAt instanceof Date) || !Number.isFinite(runAt.getTime())) {
      throw new InvalidTriggerError(
        'runAt',
        `${what}: runAt must be a valid Date (got ${JSON.stringify(runAt)})`,
      );
    }
    return { at: runAt };
  }
  return undefined;
}

/**
 * The retry policy a trigger gives its episode over the expectation's (`false`: none); undefined
 * when it gives none.
 */
export function triggerRetry(what: string, retry: unknown): RetryPolicy | false | undefined {
  if (retry === undefined || retry === false) return retry;
  const problem = retryPolicyProblem(retry);
  if (problem)
    throw new InvalidTriggerError('retry', `${what}: ${problem}, or false for no retries`);
  return retry as RetryPolicy;
}

/** The priority a trigger gives its episode over the expectation's; undefined for none. */
export function triggerPriority(what: string, priority: unknown): number | undefined {
  if (priority === undefined) return undefined;
  const problem = priorityProblem('priority', priority);
  if (problem) throw new InvalidTriggerError('priority', `${what}: ${problem}`);
  return priority as number;
}

/** Refuses, before anything is written, a payload or dedupe key that PostgreSQL would refuse. */
export function checkTriggerInput(
  what: string,
  payload: unknown,
  dedupeKey: string | null | undefined,
): void {
  const json = toJsonb(payload);
  if ('problem' in json)
    throw new InvalidTriggerError('payload', `${what}: the payload ${json.problem}`);
  if (dedupeKey === undefined || dedupeKey === null) return;
  if (typeof dedupeKey !== 'string' || dedupeKey === '') {
    throw new InvalidTriggerError(
      'dedupeKey',
      `${what}: dedupeKey must be a non-empty string (got ${JSON.stringify(dedupeKey)})`,
    );
  }
  if (dedupeKey.includes('\u0000'))
    throw new InvalidTriggerError(
      'dedupeKey',
      `${what}: dedupeKey holds a NUL character, which PostgreSQL cannot store`,
    );
  const bytes = Buffer.byteLength(dedupeKey, 'utf8');
  if (bytes > MAX_DEDUPE_KEY_BYTES) {
    throw new InvalidTriggerError(
      'dedupeKey',
      `${what}: dedupeKey must be at most ${MAX_DEDUPE_KEY_BYTES} bytes in UTF-8 (got ${bytes}); ` +
        `hash a longer one`,
    );
  }
}
