import { describe, expect, it } from '@jest/globals';
import { EventPayloadTooLargeError } from './bus-errors.js';
import { READ_MAX_BYTES, assertStoredSize, jsonbTextBytes } from './event-bounds.js';

const zeros = (n: number) => '0'.repeat(n);

describe('jsonbTextBytes: the jsonb text PostgreSQL prints for JSON.stringify output', () => {
  it.each([
    ['{"a":1,"b":[1,2]}', '{"a": 1, "b": [1, 2]}'],
    ['"a,b:c \\" ,:"', '"a,b:c \\" ,:"'],
    [
      '[1e+21,-1.5e-7,1.2345e+25,5e-324]',
      `[1${zeros(21)}, -0.00000015, 12345${zeros(21)}, 0.${zeros(323)}5]`,
    ],
    ['{"é":"ü"}', '{"é": "ü"}'],
    ['[]', '[]'],
  ])('%s prints as %s', (json, printed) => {
    expect(jsonbTextBytes(json)).toBe(Buffer.byteLength(printed, 'utf8'));
  });
});

describe('assertStoredSize', () => {
  it(
    'passes a payload whose jsonb text fits a read, and refuses one whose numbers print past ' +
      'it',
    () => {
      expect(() =>
        assertStoredSize(JSON.stringify({ text: 'x'.repeat(1_000_000) }), 'event "e"'),
      ).not.toThrow();
      const numbers = JSON.stringify(Array.from({ length: 20_000 }, () => 1e300));
      expect(numbers.length).toBeLessThan(READ_MAX_BYTES / 20);
      expect(() => assertStoredSize(numbers, 'event "e"')).toThrow(EventPayloadTooLargeError);
    },
  );
});
