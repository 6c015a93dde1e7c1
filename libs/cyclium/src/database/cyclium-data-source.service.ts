import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import pg from 'pg';
import type { DataSource } from 'typeorm';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { errorMessage } from './database-errors.js';
import { MissingSchemaError } from './missing-schema.error.js';
import { firstMissingMigration } from './schema-probe.js';
import { unnamedStatements, type SqlExecutor } from './sql-executor.js';

/**
 * The host's TypeORM DataSource, looked up by name once every provider exists (so `forRootAsync`
 * can decide `dataSource` at runtime), and the pg pool under it, which the raw-SQL rooms use
 * directly: claims and fenced writes are single statements whose cost is the point.
 */
@Injectable()
export class CycliumDataSource implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('Cyclium');
  private resolved: DataSource | undefined;
  private dedicated: pg.Pool | undefined;

  /** Queries the host's pool; resolves it on first use. */
  readonly sql: SqlExecutor = this.named({ query: (...args: [never]) => this.pool().query(...args) });

  /**
   * Queries a one-connection pool of its own, so a heartbeat never waits behind episode work
   * that has exhausted the host's pool.
   */
  readonly dedicatedSql: SqlExecutor = this.named({ query: (...args: [never]) => this.dedicatedPool().query(...args) });

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * Nest runs a module's init hooks in dependency order, so this check finishes before any provider
   * that queries through this service starts: a missing migration is named here, not as a
   * `relation does not exist` from whichever statement happens to run first.
   */
  async onModuleInit(): Promise<void> {
    this.get();
    const lacking = await firstMissingMigration(this.sql);
    if (lacking) throw new MissingSchemaError(lacking.migration, lacking.missing);
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
      const which = name ? `the TypeORM DataSource named "${name}"` : 'the default TypeORM DataSource';
      throw new CycliumConfigError([
        `dataSource: CycliumModule could not find ${which}; import TypeOrmModule.forRoot(...) in the host app`,
      ]);
    }
    if (found.options.type !== 'postgres') {
      throw new CycliumConfigError([`dataSource: Cyclium needs a PostgreSQL DataSource (got type "${found.options.type}")`]);
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
    return { ...this.pool().options };
  }

  /**
   * Runs `work` in one transaction on one connection: committed when it resolves, rolled back when
   * it throws. A connection that breaks meanwhile is discarded, never handed back to the pool, and
   * its 'error' is caught: pg emits it on a checked-out client when the server goes away, and an
   * 'error' nobody listens to ends the process.
   */
  async transaction<T>(work: (client: SqlExecutor) => Promise<T>): Promise<T> {
    const client = await this.pool().connect();
    let broken: Error | undefined;
    const onError = (error: Error) => (broken ??= error);
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const result = await work(this.named(client));
      await client.query('COMMIT');
      return result;
    } catch (error) {
      if (!broken) await client.query('ROLLBACK').catch((rollback: Error) => (broken ??= rollback));
      throw error;
    } finally {
      client.removeListener('error', onError);
      client.release(broken);
    }
  }

  /** `executor`, or with `preparedStatements: false` the same without statement names. */
  private named(executor: SqlExecutor): SqlExecutor {
    const unnamed = unnamedStatements(executor);
    // Read per query: field initialisers run before the options are assigned.
    return { query: (...args: [never]) => (this.options.preparedStatements ? executor : unnamed).query(...args) };
  }

  private dedicatedPool(): pg.Pool {
    if (!this.dedicated) {
      const pool = new pg.Pool({ ...this.pool().options, max: 1, min: 0 });
      // An idle client's connection can end at any time (a database restart); pg then emits
      // 'error' on the pool, and the pool discards that client itself.
      pool.on('error', (error) => this.logger.warn(`renewal connection lost: ${errorMessage(error)}; the next renewal opens a new one`));
      this.dedicated = pool;
    }
    return this.dedicated;
  }
}
