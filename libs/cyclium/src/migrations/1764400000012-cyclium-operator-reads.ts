import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What the status API and the operations page read, at a cost that follows the recent work and not
 * the history:
 * - finished episodes by `finished_at`, with status and actor in the index, so "terminal in the last
 *   N minutes" is an index-only range scan however many episodes finished before;
 * - event-caused episodes by their event id, so an operator holding the id `POST /events` answered
 *   finds the episodes it caused (partial: other triggers pay nothing);
 * - one episode's outputs, for its page (and for the cascade when an episode row is deleted);
 * - each node's last recovery sweep, written after every sweep.
 *
 * The indexes must not stop writes on a live table for the length of a build, so a large table
 * gets `CREATE INDEX CONCURRENTLY`, which PostgreSQL refuses inside a transaction: run inside one
 * (TypeORM's default), this migration commits what ran before it, builds concurrently, and opens a
 * new transaction for the rest. A small table (a new install, a test database) is indexed in the
 * migration's own transaction: the build takes milliseconds. A concurrent build that failed half
 * way leaves an INVALID index; it is dropped and built again.
 */
export class CycliumOperatorReads1764400000012 implements MigrationInterface {
  name = 'CycliumOperatorReads1764400000012';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes ADD COLUMN IF NOT EXISTS last_sweep jsonb`);
    const wasInTransaction = runner.isTransactionActive;
    const concurrently = !wasInTransaction || (await estimatedRows(runner, 'cyclium_episodes')) > SMALL_TABLE_ROWS;
    if (concurrently && wasInTransaction) await runner.commitTransaction();
    for (const [name, definition] of INDEXES) {
      const [found] = (await runner.query(
        `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`,
        [name],
      )) as Array<{ valid: boolean }>;
      if (found?.valid) continue;
      if (found) await runner.query(`DROP INDEX ${concurrently ? 'CONCURRENTLY ' : ''}${name}`);
      await runner.query(`CREATE INDEX ${concurrently ? 'CONCURRENTLY ' : ''}${name} ON ${definition}`);
    }
    if (concurrently && wasInTransaction) await runner.startTransaction();
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
    await runner.query(`ALTER TABLE cyclium_nodes DROP COLUMN IF EXISTS last_sweep`);
  }
}

const INDEXES: ReadonlyArray<[string, string]> = [
  ['cyclium_episodes_finished', `cyclium_episodes (finished_at) INCLUDE (status, actor_id) WHERE finished_at IS NOT NULL`],
  ['cyclium_episodes_event_id', `cyclium_episodes ((trigger_ref ->> 'eventId')) WHERE trigger_type = 'event'`],
  ['cyclium_outputs_episode', `cyclium_outputs (episode_id)`],
];

/** Below this many rows (the planner's estimate) a plain build holds writes back for well under a second. */
const SMALL_TABLE_ROWS = 100_000;

async function estimatedRows(runner: QueryRunner, table: string): Promise<number> {
  const [row] = (await runner.query(`SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = to_regclass($1)`, [table])) as Array<{
    rows: number;
  }>;
  return row?.rows ?? 0;
}
