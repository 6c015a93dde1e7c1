import type { QueryConfig, QueryResult, QueryResultRow } from 'pg';

/**
 * What the raw-SQL rooms need from a pool or a checked-out client: one query with positional
 * parameters, as text + values or as a named (server-side prepared) statement.
 */
export interface SqlExecutor {
  /** Runs one statement, as text and positional values, and returns its rows. */
  query<R extends QueryResultRow = QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<QueryResult<R>>;
  /** Runs one statement, as a config (named: prepared once per connection). */
  query<R extends QueryResultRow = QueryResultRow>(config: QueryConfig): Promise<QueryResult<R>>;
}

/** A statement the hot paths run thousands of times a second: prepared once per connection. */
export function prepared(name: string, text: string) {
  return (values: unknown[]): QueryConfig => ({ name: `cyclium_${name}`, text, values });
}

/**
 * The same executor, sending every statement unnamed: a pooler in transaction mode hands each
 * transaction to any server connection, where a name this client prepared elsewhere is missing
 * or, prepared there by another client, already exists.
 */
export function unnamedStatements(executor: SqlExecutor): SqlExecutor {
  const query = (first: string | QueryConfig, values?: unknown[]) =>
    typeof first === 'string'
      ? executor.query(first, values)
      : executor.query({ ...first, name: undefined });
  return { query: query as SqlExecutor['query'] };
}
