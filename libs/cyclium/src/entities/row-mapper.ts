import { getMetadataArgsStorage } from 'typeorm';

/**
 * How one column's value as pg returns it becomes the property's; the value as it is when absent.
 */
export type ColumnConversions<T> = { [K in keyof T]?: (value: unknown) => T[K] };

/** A row as pg returns it (snake_case columns) onto the entity's shape (camelCase properties). */
export type RowMapper<T> = (row: Record<string, unknown>) => T;

/**
 * The row mapper of an entity, from the columns its decorators declare: every property, in
 * declaration order, read from its column (`name`, or the property's own name). The column list
 * is read once, here; a row costs one plain loop, no reflection, since the mappers run on hot
 * paths (every episode begin). The result is a plain object, as the hand-written mappers made.
 */
export function rowMapper<T>(
  entity: new () => T,
  conversions: ColumnConversions<T> = {},
): RowMapper<T> {
  const columns = getMetadataArgsStorage().filterColumns(entity);
  const properties = columns.map((c) => c.propertyName);
  for (const property of Object.keys(conversions)) {
    if (!properties.includes(property))
      throw new Error(`rowMapper: ${entity.name} has no column for the property ${property}`);
  }
  const names = columns.map((c) => c.options.name ?? c.propertyName);
  const converts = properties.map(
    (p) => (conversions as Record<string, ((value: unknown) => unknown) | undefined>)[p],
  );
  const count = properties.length;
  return (row) => {
    const out: Record<string, unknown> = {};
    for (let i = 0; i < count; i++) {
      const value = row[names[i] as string];
      const convert = converts[i];
      out[properties[i] as string] = convert === undefined ? value : convert(value);
    }
    return out as T;
  };
}

/**
 * NULL for a column the row lacks (a statement that returns fewer columns, a row read before a
 * migration added the column) as for NULL itself.
 */
export const nullWhenAbsent = <T>(value: unknown): T | null => (value ?? null) as T | null;

/**
 * A jsonb object column read as `{}` when NULL or absent (a fresh object each time: callers may
 * change it).
 */
export const emptyWhenAbsent = <T extends object>(value: unknown): T => (value ?? {}) as T;
