import { EventPayloadTooLargeError, InvalidBusEventError } from './bus-errors.js';

/**
 * How long an event's id and type may be, in characters. Both end up in btree indexes (the id in
 * the unique one that makes a retry safe, both in dedupe keys), whose rows PostgreSQL caps at
 * about 2.7 KB: a longer id used to fail its whole batch with error 54000. 200 characters are at
 * most 800 bytes of UTF-8, far below the cap whatever the text.
 */
export const MAX_EVENT_ID_CHARS = 200;
/** How long an event's type may be, in characters (see `MAX_EVENT_ID_CHARS`). */
export const MAX_EVENT_TYPE_CHARS = 200;

/** Default for `busMaxPayloadBytes`: 1 MiB of JSON. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

/**
 * What one read of the bus loads at most: the payloads of its rows as text (see EventLog). A row
 * over it alone is never loaded, so every event a writer of this library stores must fit it.
 */
export const READ_MAX_BYTES = 4 * 1_048_576;

/**
 * The most `busMaxPayloadBytes` may be: half a read, since PostgreSQL prints jsonb with a space
 * after each `,` and `:`, up to 1.5 times the JSON's bytes (assertStoredSize checks the rest).
 */
export const MAX_PAYLOAD_BYTES = READ_MAX_BYTES / 2;

/**
 * At most this many bytes of jsonb text per byte of JSON (a number like `5e-324` prints 327
 * characters).
 */
const MAX_TEXT_PER_JSON_BYTE = 55;

/** Refuses a type or id over its bound, naming the field, before anything is queued. */
export function assertEventBounds(type: string, eventId: string): void {
  assertChars('type', type, MAX_EVENT_TYPE_CHARS);
  assertChars('eventId', eventId, MAX_EVENT_ID_CHARS);
}

/** Refuses a payload whose JSON is over `limitBytes` (UTF-8), naming the event. */
export function assertPayloadSize(payloadJson: string, limitBytes: number, what: string): void {
  // A string's UTF-8 size is at most three bytes per UTF-16 unit: skip the count when it cannot
  // exceed.
  if (payloadJson.length * 3 <= limitBytes) return;
  const bytes = Buffer.byteLength(payloadJson, 'utf8');
  if (bytes > limitBytes) {
    throw new EventPayloadTooLargeError(
      `bus: payload of ${what} is ${bytes} bytes of JSON, over the limit of ${limitBytes} ` +
        `(busMaxPayloadBytes)`,
      bytes,
      limitBytes,
    );
  }
}

/**
 * Refuses a payload whose jsonb, printed as text, would be over what a bus read loads
 * (READ_MAX_BYTES): such a row would never be delivered. Cheap for a small payload; a larger one
 * is measured exactly (jsonbTextBytes).
 */
export function assertStoredSize(payloadJson: string, what: string): void {
  if (payloadJson.length * 3 * MAX_TEXT_PER_JSON_BYTE <= READ_MAX_BYTES) return;
  const bytes = jsonbTextBytes(payloadJson);
  if (bytes > READ_MAX_BYTES) {
    throw new EventPayloadTooLargeError(
      `bus: payload of ${what} would be stored as ${bytes} bytes of jsonb text, ` +
        `over the ${READ_MAX_BYTES} a bus read loads (PostgreSQL prints numbers in full: 1e300 ` +
        `is 301 digits)`,
      bytes,
      READ_MAX_BYTES,
    );
  }
}

const code = (ch: string) => ch.charCodeAt(0);
const [QUOTE, BACKSLASH, COMMA, COLON, MINUS, ZERO, NINE] = [
  '"',
  '\\',
  ',',
  ':',
  '-',
  '0',
  '9',
].map(code);
const NUMBER_CHARS = /[0-9.eE+-]/;
const NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/**
 * The UTF-8 bytes PostgreSQL prints for the jsonb that `json` (JSON.stringify's output) becomes:
 * the same strings, with `, ` and `: ` for `,` and `:`, and numbers in plain notation (`1e+21`
 * prints 22 digits, `1.5e-7` as `0.00000015`).
 */
export function jsonbTextBytes(json: string): number {
  let bytes = Buffer.byteLength(json, 'utf8');
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (c === QUOTE) {
      for (i++; i < json.length && json.charCodeAt(i) !== QUOTE; i++)
        if (json.charCodeAt(i) === BACKSLASH) i++;
    } else if (c === COMMA || c === COLON) {
      bytes++;
    } else if (c === MINUS || (c >= ZERO && c <= NINE)) {
      let end = i + 1;
      while (end < json.length && NUMBER_CHARS.test(json.charAt(end))) end++;
      const literal = json.slice(i, end);
      bytes += plainLength(literal) - literal.length;
      i = end - 1;
    }
  }
  return bytes;
}

/**
 * How PostgreSQL's numeric prints a JSON number literal: its digits in plain notation, at the
 * literal's scale.
 */
function plainLength(literal: string): number {
  const match = NUMBER.exec(literal);
  if (!match?.[4]) return literal.length;
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = match;
  const shift = Number(exponent);
  const wholeDigits = Math.max(1, whole.length + shift);
  const scale = Math.max(0, fraction.length - shift);
  return sign.length + wholeDigits + (scale > 0 ? 1 + scale : 0);
}

function assertChars(field: 'type' | 'eventId', value: string, max: number): void {
  // Code points, not UTF-16 units, so an emoji counts once; the cheap test first.
  if (value.length <= max) return;
  const chars = [...value].length;
  if (chars > max) {
    throw new InvalidBusEventError(
      `bus: ${field} must be at most ${max} characters (got ${chars}: ` +
        `${JSON.stringify(value.slice(0, 40))}…)`,
      field,
    );
  }
}
