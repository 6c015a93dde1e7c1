/**
 * The policies the fault-schedule actors declare, in a file of their own so the generator and the
 * checker read the same numbers without loading the actors.
 */

/** The retry policy of the event-triggered expectations (the checker reads it from here). */
export const EVENT_RETRY = {
  attempts: 3,
  backoff: { initialMs: 400, factor: 2, maxMs: 2_000 },
  jitter: 0,
};
/** `subjectKey` windows of `on_subject`. */
export const SUBJECT_DEBOUNCE_MS = 800;
export const SUBJECT_COOLDOWN_MS = 2_500;
/** Crash recoveries an expectation allows (maxAttempts). */
export const MAX_ATTEMPTS = 3;
