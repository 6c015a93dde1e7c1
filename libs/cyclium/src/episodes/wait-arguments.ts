import { isReservedType } from '../bus/reserved-types.js';
import type { ChildSpec, WaitSpec } from './step-ports.interface.js';
import type {
  ChildHandle,
  EventWaitOptions,
  MatchValue,
  StartChildOptions,
  WaitOptions,
} from './wait.types.js';

// The arguments a method passes to ep.sleep, ep.waitForSignal, ep.waitForEvent, ep.startChild,
// ep.waitForChildren and the patch calls, checked before anything is journaled: a bad one throws
// in the method, naming the call and the field, and the run goes on as the method decides.

/** A name, type or id: a non-empty string of at most 200 characters. */
export function checkName(call: string, field: string, value: unknown): void {
  if (typeof value !== 'string' || value === '' || value.length > 200)
    throw new TypeError(
      `${call}: ${field} must be a non-empty string of at most 200 characters (got ` +
        `${JSON.stringify(value)})`,
    );
}

/** ep.sleep's milliseconds. */
export function checkSleep(name: string, ms: number): void {
  if (!(Number.isSafeInteger(ms) && ms >= 0))
    throw new RangeError(
      `ep.sleep("${name}", ms): ms must be a whole number of milliseconds >= 0 (got ${ms})`,
    );
}

export function signalWait(name: string, options: WaitOptions): WaitSpec {
  checkName('ep.waitForSignal', 'name', name);
  const timeoutMs = checkTimeout(`ep.waitForSignal("${name}")`, options.timeoutMs);
  return { kind: 'signal', name, timeoutMs };
}

export function eventWait(type: string, options: EventWaitOptions): WaitSpec {
  checkName('ep.waitForEvent', 'type', type);
  // The library's own events never wake a wait (the match trigger skips them).
  if (isReservedType(type))
    throw new TypeError(`ep.waitForEvent("${type}"): a library event type cannot be waited for`);
  const timeoutMs = checkTimeout(`ep.waitForEvent("${type}")`, options.timeoutMs);
  const match = checkMatch(type, options.match ?? {});
  return { kind: 'event', type, match, timeoutMs };
}

export function childrenWait(
  handles: readonly ChildHandle[],
  options: WaitOptions,
): Extract<WaitSpec, { kind: 'children' }> {
  const children: unknown[] = Array.from(handles ?? [], (h: ChildHandle) => h?.episodeId);
  if (children.some((id) => typeof id !== 'string'))
    throw new TypeError('ep.waitForChildren: pass the handles ep.startChild returned');
  const timeoutMs = checkTimeout('ep.waitForChildren', options.timeoutMs);
  return { kind: 'children', children: children as string[], timeoutMs };
}

export function childSpec<C>(
  actorId: string,
  expectationId: string,
  payload: C,
  options: StartChildOptions,
): ChildSpec {
  const key = options?.key;
  if (typeof key !== 'string' || key === '' || key.length > 200 || key.includes('\u0000'))
    throw new TypeError(
      `ep.startChild(${actorId}.${expectationId}): key must be a non-empty string of at most ` +
        `200 characters without NUL (got ${JSON.stringify(key)})`,
    );
  return { actorId, expectationId, payload, key, detached: options.detached === true };
}

function checkTimeout(call: string, timeoutMs: unknown): number | undefined {
  if (timeoutMs === undefined) return undefined;
  if (!(typeof timeoutMs === 'number' && Number.isSafeInteger(timeoutMs) && timeoutMs >= 0))
    throw new RangeError(
      `${call}: timeoutMs must be a whole number of milliseconds >= 0 (got ` +
        `${JSON.stringify(timeoutMs)})`,
    );
  return timeoutMs;
}

function checkMatch(type: string, match: unknown): Record<string, MatchValue> {
  const scalar = (v: unknown) =>
    v === null ||
    typeof v === 'string' ||
    typeof v === 'boolean' ||
    (typeof v === 'number' && Number.isFinite(v));
  if (
    typeof match !== 'object' ||
    match === null ||
    Array.isArray(match) ||
    Object.keys(match).length > 16 ||
    !Object.values(match).every(scalar)
  )
    throw new TypeError(
      `ep.waitForEvent("${type}"): match must be an object of at most 16 fields whose values are ` +
        `strings, numbers, booleans or null`,
    );
  return { ...(match as Record<string, MatchValue>) };
}
