import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import pg from 'pg';
import type { DataSource } from 'typeorm';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { errorMessage } from '../sql/database-errors.js';
import { MissingSchemaError } from '../sql/missing-schema.error.js';
import { firstMissingMigration } from './schema-probe.js';
import { connectAtBoot } from './first-connection.js';
import { unnamedStatements, type SqlExecutor } from '../sql/sql-executor.js';
import { StatementBounds } from './statement-bounds.js';
import { StartupWait } from './startup-wait.js';
import { keepClientErrorsHandled } from './client-errors.js';

/**
 * The host's TypeORM DataSource, looked up by name once every provider exists (so `forRootAsync`
 * can decide `dataSource` at runtime), and the pg pool under it, which the raw-SQL rooms use
 * directly: claims and fenced writes are single statements whose cost is the point. Every statement
 * and connection checkout of the library's is bounded (`queryTimeoutMs`, `checkoutTimeoutMs`) on
 * the client side, without touching the pool's settings: a database that stops answering fails the
 * library's callers with DatabaseUnavailableError instead of hanging them.
 */
@Injectable()
export class CycliumDataSource implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('Cyclium');
  private resolved: DataSource | undefined;
  private dedicated: pg.Pool | undefined;
  private readonly bounds: StatementBounds;
  private readonly startupWait: StartupWait;

  /** Queries the host's pool; resolves it on first use. */
  readonly sql: SqlExecutor = this.named({
    query: (...args: unknown[]) => this.bounds.query(this.pool(), args),
  } as SqlExecutor);

  /**
   * Queries a one-connection pool of its own, so a heartbeat never waits behind episode work
   * that has exhausted the host's pool.
   */
  readonly dedicatedSql: SqlExecutor = this.named({
    query: (...args: unknown[]) => this.bounds.query(this.dedicatedPool(), args),
  } as SqlExecutor);

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {
    this.bounds = new StatementBounds(options);
    this.startupWait = new StartupWait(options.startupWaitMs, (line) => this.logger.warn(line));
  }

  /**
   * Nest runs a module's init hooks in dependency order, so this check finishes before any provider
   * that queries through this service starts: a missing migration is named here, not as a
   * `relation does not exist` from whichever statement happens to run first.
   */
  async onModuleInit(): Promise<void> {
    const dataSource = this.get();
    // A host that set `manualInitialization` gets a boot that fails fast and says why, instead of
    // TypeORM's retries with a stack trace each, even for a wrong password.
    if (!dataSource.isInitialized) await connectAtBoot(dataSource, this.startupWait);
    keepClientErrorsHandled(this.pool());
    const lacking = await this.atBoot('checking the schema', () => firstMissingMigration(this.sql));
    if (lacking) throw new MissingSchemaError(lacking.migration, lacking.missing);
  }

  /**
   * A step of boot that touches the database (`what` names it in log lines): a database that is
   * not up yet, or goes away during boot (a failover), is waited for up to `startupWaitMs`, so
   * the node becomes ready when it returns instead of exiting; see StartupWait.
   */
  atBoot<T>(what: string, work: () => Promise<T>): Promise<T> {
    return this.startupWait.run(what, work);
  }

  async onApplicationShutdown(): Promise<void> {
    const dedicated = this.dedicated;
    this.dedicated = undefined;
    await dedicated?.end();
  }

  get(): DataSource {
    if (this.resolved) return this.resolved;
    const name = this.options.dataSource;
    let found: DataSource;
    try {
      found = this.moduleRef.get<DataSource>(getDataSourceToken(name), { strict: false });
    } catch {
      const which = name
        ? `the TypeORM DataSource named "${name}"`
        : 'the default TypeORM DataSource';
      throw new CycliumConfigError([
        `dataSource: CycliumModule could not find ${which}; import TypeOrmModule.forRoot(...) in ` +
          `the host app`,
      ]);
    }
    if (found.options.type !== 'postgres') {
      throw new CycliumConfigError([
        `dataSource: Cyclium needs a PostgreSQL DataSource (got type "${found.options.type}")`,
      ]);
    }
    this.resolved = found;
    return found;
  }

  /** The pg pool TypeORM opened for the host. */
  pool(): pg.Pool {
    return (this.get().driver as unknown as { master: pg.Pool }).master;
  }

  /** How to open a connection of our own to the host's database (the bus's LISTEN client). */
  connectionConfig(): pg.ClientConfig {
    return { ...this.pool().options, ...this.ownConnectionBounds() };
  }

  /**
   * Runs `work` in one transaction on one connection: committed when it resolves, rolled back when
   * it throws. A connection that breaks meanwhile (an 'error', a statement past `queryTimeoutMs`)
   * is discarded, never handed back to the pool; the server rolls back what it had not committed.
   */
  async transaction<T>(work: (client: SqlExecutor) => Promise<T>): Promise<T> {
    const client = await this.bounds.checkout(this.pool());
    let failed: Error | undefined;
    try {
      await client.sql.query('BEGIN');
      const result = await work(this.named(client.sql));
      await client.sql.query('COMMIT');
      return result;
    } catch (error) {
      if (!client.broken)
        await client.sql.query('ROLLBACK').catch((rollback: Error) => (failed = rollback));
      throw error;
    } finally {
      client.release(failed);
    }
  }

  /**
   * The bounds for connections the library opens itself (not the host's pool, whose settings stay
   * the host's): a connect or a statement that a frozen server never answers would otherwise hold
   * the renewal pool's one connection, or the LISTEN reconnect loop, until the server resumes.
   * Values the host set on its pool win.
   */
  private ownConnectionBounds(): Pick<
    pg.ClientConfig,
    'connectionTimeoutMillis' | 'query_timeout'
  > {
    const host = this.pool().options;
    return {
      connectionTimeoutMillis: host.connectionTimeoutMillis || this.options.checkoutTimeoutMs,
      query_timeout: host.query_timeout || this.options.queryTimeoutMs,
    };
  }

  /** `executor`, or with `preparedStatements: false` the same without statement names. */
  private named(executor: SqlExecutor): SqlExecutor {
    const unnamed = unnamedStatements(executor);
    // Read per query: field initialisers run before the options are assigned.
    return {
      query: (...args: [never]) =>
        (this.options.preparedStatements ? executor : unnamed).query(...args),
    };
  }

  private dedicatedPool(): pg.Pool {
    if (!this.dedicated) {
      const pool = new pg.Pool({
        ...this.pool().options,
        max: 1,
        min: 0,
        ...this.ownConnectionBounds(),
      });
      // An idle client's connection can end at any time (a database restart); pg then emits
      // 'error' on the pool, and the pool discards that client itself.
      pool.on('error', (error) =>
        this.logger.warn(
          `renewal connection lost: ${errorMessage(error)}; the next renewal opens a new one`,
        ),
      );
      keepClientErrorsHandled(pool);
      this.dedicated = pool;
    }
    return this.dedicated;
  }
}
