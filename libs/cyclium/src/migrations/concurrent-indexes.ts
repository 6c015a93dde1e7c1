import type { QueryRunner } from 'typeorm';

/**
 * Below this many rows (the planner's estimate) a plain build holds writes back for well under a
 * second.
 */
const SMALL_TABLE_ROWS = 100_000;

/**
 * Builds `indexes` ([name, `table (columns) …`]) without stopping writes on a live table for the
 * length of a build: when any of `tables` is large, `CREATE INDEX CONCURRENTLY`, which PostgreSQL
 * refuses inside a transaction, so run inside one (TypeORM's default) this commits what ran before,
 * builds concurrently, and opens a new transaction for the rest. Small tables (a new install, a
 * test database) are indexed in the migration's own transaction: the build takes milliseconds. A
 * concurrent build that failed half way leaves an INVALID index; it is dropped and built again,
 * and a valid one is left as it is, so the migration can be run again after any failure.
 */
export async function buildIndexes(
  runner: QueryRunner,
  tables: readonly string[],
  indexes: ReadonlyArray<readonly [string, string]>,
): Promise<void> {
  await concurrentlyWhenLarge(runner, tables, async (concurrently) => {
    for (const [name, definition] of indexes) {
      const [found] = (await runner.query(
        `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid ` +
          `WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`,
        [name],
      )) as Array<{ valid: boolean }>;
      if (found?.valid) continue;
      if (found) await runner.query(`DROP INDEX ${concurrently ? 'CONCURRENTLY ' : ''}${name}`);
      await runner.query(
        `CREATE INDEX ${concurrently ? 'CONCURRENTLY ' : ''}${name} ON ${definition}`,
      );
    }
  });
}

/**
 * Drops `names` (indexes on `tables`) without stopping writes for the length of the drop on a large
 * table: `DROP INDEX CONCURRENTLY` outside the migration's transaction, as buildIndexes builds.
 * An index already gone is skipped, so the migration can be run again after any failure.
 */
export async function dropIndexes(
  runner: QueryRunner,
  tables: readonly string[],
  names: readonly string[],
): Promise<void> {
  await concurrentlyWhenLarge(runner, tables, async (concurrently) => {
    for (const name of names)
      await runner.query(`DROP INDEX ${concurrently ? 'CONCURRENTLY ' : ''}IF EXISTS ${name}`);
  });
}

/**
 * Runs `work` told whether to use CONCURRENTLY: yes outside a transaction, or when any of `tables`
 * is large, and then outside the migration's transaction (committed before, a new one opened
 * after), which PostgreSQL requires of a concurrent build or drop.
 */
async function concurrentlyWhenLarge(
  runner: QueryRunner,
  tables: readonly string[],
  work: (concurrently: boolean) => Promise<void>,
): Promise<void> {
  const wasInTransaction = runner.isTransactionActive;
  let concurrently = !wasInTransaction;
  for (const table of tables)
    concurrently ||= (await estimatedRows(runner, table)) > SMALL_TABLE_ROWS;
  if (concurrently && wasInTransaction) await runner.commitTransaction();
  await work(concurrently);
  if (concurrently && wasInTransaction) await runner.startTransaction();
}

/**
 * Validates constraints added `NOT VALID` ([table, constraint]). VALIDATE scans the table under a
 * lock that lets writes through, but inside the transaction that added the constraint the ADD's
 * exclusive lock would hold them back for the whole scan: on a large table this commits first,
 * validates, and opens a new transaction for the rest, as buildIndexes does.
 */
export async function validateConstraints(
  runner: QueryRunner,
  constraints: ReadonlyArray<readonly [string, string]>,
): Promise<void> {
  const wasInTransaction = runner.isTransactionActive;
  let outside = false;
  for (const [table] of constraints)
    outside ||= (await estimatedRows(runner, table)) > SMALL_TABLE_ROWS;
  if (outside && wasInTransaction) await runner.commitTransaction();
  for (const [table, name] of constraints)
    await runner.query(`ALTER TABLE ${table} VALIDATE CONSTRAINT ${name}`);
  if (outside && wasInTransaction) await runner.startTransaction();
}

async function estimatedRows(runner: QueryRunner, table: string): Promise<number> {
  const [row] = (await runner.query(
    `SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = to_regclass($1)`,
    [table],
  )) as Array<{
    rows: number;
  }>;
  return row?.rows ?? 0;
}
