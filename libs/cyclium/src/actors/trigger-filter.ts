import type { FilterValue } from './expectation.decorator.js';

/** Reads `a.b.c` from a payload; undefined when any step is missing. */
export function readPath(payload: unknown, path: string): unknown {
  let value: unknown = payload;
  for (const part of path.split('.')) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

export function matchesFilter(
  filter: Record<string, FilterValue> | undefined,
  payload: unknown,
): boolean {
  if (!filter) return true;
  return Object.entries(filter).every(([path, expected]) => {
    const actual = readPath(payload, path);
    if (expected !== null && typeof expected === 'object')
      return expected.in.some((v) => v === actual);
    return actual === expected;
  });
}
