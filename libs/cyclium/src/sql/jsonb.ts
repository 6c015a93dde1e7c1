import { errorMessage } from './database-errors.js';

/**
 * `\u0000` or a surrogate escape not preceded by an escaped backslash (an even run of backslashes).
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/**
 * `value` as JSON a jsonb column accepts, or why it cannot be: JSON.stringify fails on cycles and
 * BigInts, and jsonb refuses NUL characters and unpaired surrogates, which JSON.stringify writes as
 * `\u0000` and `\udXXX` escapes (paired surrogates it writes as they are). Checked before a write,
 * so bad input fails its own call with a reason instead of a statement (or a batch) later.
 */
export function toJsonb(value: unknown): { json: string } | { problem: string } {
  let json: string | undefined;
  try {
    json = JSON.stringify(value ?? null);
  } catch (error) {
    return { problem: `cannot be serialised as JSON: ${errorMessage(error)}` };
  }
  json ??= 'null';
  if (hasUnstorableEscape(json)) {
    return {
      problem: 'holds a NUL character or an unpaired surrogate, which PostgreSQL cannot store',
    };
  }
  return { json };
}

/** True when JSON text holds an escape jsonb refuses: `\u0000`, or an unpaired surrogate. */
export function hasUnstorableEscape(json: string): boolean {
  return json.includes('\\u') && UNSTORABLE_ESCAPE.test(json);
}
