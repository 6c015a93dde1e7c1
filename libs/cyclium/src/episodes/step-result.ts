import { errorMessage } from '../sql/database-errors.js';
import { hasUnstorableEscape } from '../sql/jsonb.js';
import { StepResultError } from './episode-errors.js';

/**
 * A step's result as the jsonb its journal row and checkpoint store: `{"v": result}` when jsonb
 * takes it as it is, else `{"j": "<its JSON text>"}`. jsonb refuses a NUL character or an unpaired
 * surrogate, but a JSON string carries their escapes as plain text, so the step's side effect
 * (which has already happened) keeps its result exactly. A result that is not JSON at all (a cycle,
 * a BigInt) fails the step with StepResultError, naming it.
 */
export function encodeStepResult(stepName: string, result: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(result ?? null);
  } catch (error) {
    throw new StepResultError(stepName, `cannot be serialised as JSON: ${errorMessage(error)}`);
  }
  json ??= 'null';
  return hasUnstorableEscape(json) ? `{"j":${JSON.stringify(json)}}` : `{"v":${json}}`;
}

/** The result `encodeStepResult` stored, as the step returned it (after a JSON round trip). */
export function decodeStepResult(stored: unknown): unknown {
  const text = storedText(stored);
  if (text !== undefined) return JSON.parse(text);
  return stored !== null && typeof stored === 'object' ? (stored as { v?: unknown }).v : undefined;
}

/**
 * The journal's `resultRef` in the one shape readers see, `{ v: result }`, however it was stored.
 */
export function presentStepResult(stored: unknown): unknown {
  return storedText(stored) === undefined ? stored : { v: decodeStepResult(stored) };
}

function storedText(stored: unknown): string | undefined {
  const text =
    stored !== null && typeof stored === 'object' ? (stored as { j?: unknown }).j : undefined;
  return typeof text === 'string' ? text : undefined;
}
