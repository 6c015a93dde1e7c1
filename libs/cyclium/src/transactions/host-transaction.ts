import type { EntityManager, QueryRunner } from 'typeorm';
import type { SqlExecutor } from '../sql/sql-executor.js';

/**
 * The host's open transaction, as TypeORM hands it out: the `EntityManager` of
 * `dataSource.transaction(async (manager) => …)`, or a `QueryRunner` after `startTransaction()`.
 * What the library writes through it commits with the host's own writes, or not at all.
 */
export type HostTransaction = EntityManager | QueryRunner;

/** The option that writes through the host's transaction (`Episodes.trigger`, `Bus.publish`, …). */
export interface InHostTransaction {
  /**
   * Write through this open transaction instead of the library's own connection: nothing is
   * visible (or runs) until the host commits, and a rollback leaves nothing behind. It must be on
   * the same PostgreSQL database as the library's DataSource.
   */
  manager?: HostTransaction;
}

/**
 * A `manager` the library cannot write through: not inside an open transaction, not PostgreSQL, or
 * passed to a bus that does not keep its events in the database.
 */
export class HostTransactionError extends Error {
  override readonly name = 'HostTransactionError';
}

/**
 * The statements of the host's open transaction: what the rooms that write through it are handed
 * (HostTransactions is the one shipped).
 */
export interface HostExecutors {
  /** `what` names the call in the HostTransactionError a manager outside a transaction gets. */
  executor(tx: HostTransaction, what: string): Promise<SqlExecutor>;
}
