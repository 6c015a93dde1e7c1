import { EventPayloadTooLargeError, InvalidBusEventError } from './bus-errors.js';

/**
 * How long an event's id and type may be, in characters. Both end up in btree indexes (the id in
 * the unique one that makes a retry safe, both in dedupe keys), whose rows PostgreSQL caps at
 * about 2.7 KB: a longer id used to fail its whole batch with error 54000. 200 characters are at
 * most 800 bytes of UTF-8, far below the cap whatever the text.
 */
export const MAX_EVENT_ID_CHARS = 200;
export const MAX_EVENT_TYPE_CHARS = 200;

/** Default for `busMaxPayloadBytes`: 1 MiB of JSON. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

/** Refuses a type or id over its bound, naming the field, before anything is queued. */
export function assertEventBounds(type: string, eventId: string): void {
  assertChars('type', type, MAX_EVENT_TYPE_CHARS);
  assertChars('eventId', eventId, MAX_EVENT_ID_CHARS);
}

/** Refuses a payload whose JSON is over `limitBytes` (UTF-8), naming the event. */
export function assertPayloadSize(payloadJson: string, limitBytes: number, what: string): void {
  // A string's UTF-8 size is at most three bytes per UTF-16 unit: skip the count when it cannot exceed.
  if (payloadJson.length * 3 <= limitBytes) return;
  const bytes = Buffer.byteLength(payloadJson, 'utf8');
  if (bytes > limitBytes) {
    throw new EventPayloadTooLargeError(
      `bus: payload of ${what} is ${bytes} bytes of JSON, over the limit of ${limitBytes} (busMaxPayloadBytes)`,
      bytes,
      limitBytes,
    );
  }
}

function assertChars(field: 'type' | 'eventId', value: string, max: number): void {
  // Code points, not UTF-16 units, so an emoji counts once; the cheap test first.
  if (value.length <= max) return;
  const chars = [...value].length;
  if (chars > max) {
    throw new InvalidBusEventError(`bus: ${field} must be at most ${max} characters (got ${chars}: ${JSON.stringify(value.slice(0, 40))}…)`, field);
  }
}
