import { Inject, Injectable } from '@nestjs/common';
import type pg from 'pg';
import type { QueryRunner } from 'typeorm';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { unnamedStatements, type SqlExecutor } from '../sql/sql-executor.js';
import {
  HostTransactionError,
  type HostExecutors,
  type HostTransaction,
} from '../transactions/host-transaction.js';

/**
 * Turns the host's open transaction into the executor the raw-SQL rooms write through. The
 * statements go to the transaction's own connection (the pg client under TypeORM's query runner),
 * so they commit or roll back with the host's writes; without `preparedStatements` they go
 * unnamed, as everywhere (a transaction-mode pooler).
 */
@Injectable()
export class HostTransactions implements HostExecutors {
  constructor(@Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions) {}

  /** `what` names the call in the error a manager outside a transaction gets. */
  async executor(tx: HostTransaction, what: string): Promise<SqlExecutor> {
    const runner = queryRunnerOf(tx);
    if (!runner || runner.isReleased || !runner.isTransactionActive) {
      throw new HostTransactionError(
        `${what}: the manager passed is not inside an open transaction; pass the EntityManager ` +
          `that dataSource.transaction(async (manager) => …) hands you, or a QueryRunner after ` +
          `startTransaction()`,
      );
    }
    const type = runner.dataSource.options.type;
    if (type !== 'postgres')
      throw new HostTransactionError(
        `${what}: the manager passed is a ${type} transaction; Cyclium writes to PostgreSQL`,
      );
    const client = (await runner.connect()) as pg.PoolClient;
    const direct: SqlExecutor = { query: client.query.bind(client) as SqlExecutor['query'] };
    return this.options.preparedStatements ? direct : unnamedStatements(direct);
  }
}

/** The query runner under a manager (none for a DataSource's own manager), or the runner itself. */
function queryRunnerOf(tx: HostTransaction): QueryRunner | undefined {
  if (tx === null || typeof tx !== 'object') return undefined;
  if ('isTransactionActive' in tx && 'startTransaction' in tx) return tx;
  return 'queryRunner' in tx ? tx.queryRunner : undefined;
}
