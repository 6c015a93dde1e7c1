/**
 * One text per JSON value, whatever order its keys were written or read in: object keys sorted
 * (by UTF-16 code units), no whitespace. A value and its jsonb round trip give the same text (jsonb
 * reorders keys and PostgreSQL renders numbers its own way; both parse back to the same value), so
 * a signature over it holds from the writer's value to the reader's row.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) {
    const items = value.map((item) => (item === undefined ? 'null' : canonicalJson(item)));
    return `[${items.join(',')}]`;
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`;
}
