/**
 * The soak's PostgreSQL: its own embedded server on a fixed data folder and port, so it can be
 * stopped and started again under the nodes (a database restart), or a server given by
 * DATABASE_URL, which the soak never restarts. Each seed gets a database of its own, cloned from a
 * template that holds the schema, the audit triggers and the side-effect tables.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import {
  freePort,
  migrateDatabase,
  startPostgres,
  type RunningPostgres,
} from '@cyclium/nestjs/testing';
import { AUDIT_SQL } from '../checker/audit-sql.js';

const TEMPLATE = 'fault_schedule_template';

export class PostgresServer {
  private running: RunningPostgres | undefined;

  private constructor(
    readonly baseUrl: string,
    readonly restartable: boolean,
    private readonly dataRoot: string | undefined,
    private readonly port: number,
  ) {}

  /** The given server, or a new embedded one; the template is (re)made either way. */
  static async open(databaseUrl: string | undefined): Promise<PostgresServer> {
    let server: PostgresServer;
    if (databaseUrl) {
      server = new PostgresServer(databaseUrl, false, undefined, 0);
    } else {
      const dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-soak-'));
      const port = await freePort();
      const running = await startPostgres({
        dataDir: join(dataRoot, 'pgdata'),
        port,
        persistent: true,
      });
      server = new PostgresServer(running.url, true, dataRoot, port);
      server.running = running;
    }
    await server.makeTemplate();
    return server;
  }

  urlOf(database: string): string {
    const url = new URL(this.baseUrl);
    url.pathname = `/${database}`;
    return url.toString();
  }

  /** A fresh database for `seed`, from the template. */
  async databaseFor(seed: number): Promise<string> {
    const name = `fault_seed_${seed}`;
    await this.admin(async (client) => {
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.query(`CREATE DATABASE ${name} TEMPLATE ${TEMPLATE}`);
    });
    return this.urlOf(name);
  }

  async dropDatabase(url: string): Promise<void> {
    const name = new URL(url).pathname.slice(1);
    await this.admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  }

  /** Stops the embedded server (a database outage begins). */
  async stop(): Promise<void> {
    if (!this.restartable) throw new Error('a server given by DATABASE_URL is never restarted');
    const running = this.running;
    this.running = undefined;
    await running?.stop();
  }

  /** Starts it again on the same folder and port. */
  async start(): Promise<void> {
    if (!this.restartable || this.running) return;
    this.running = await startPostgres({
      dataDir: join(this.dataRoot as string, 'pgdata'),
      port: this.port,
      persistent: true,
    });
  }

  get up(): boolean {
    return !this.restartable || this.running !== undefined;
  }

  /** Stops the server for good and removes its files. */
  async close(): Promise<void> {
    await this.running?.stop().catch(() => undefined);
    this.running = undefined;
    if (this.dataRoot) await rm(this.dataRoot, { recursive: true, force: true });
  }

  private async makeTemplate(): Promise<void> {
    await this.admin(async (client) => {
      await client.query(`DROP DATABASE IF EXISTS ${TEMPLATE} WITH (FORCE)`);
      await client.query(`CREATE DATABASE ${TEMPLATE}`);
    });
    const url = this.urlOf(TEMPLATE);
    await migrateDatabase(url);
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.query(AUDIT_SQL);
    } finally {
      await client.end();
    }
  }

  private async admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: this.baseUrl });
    client.on('error', () => undefined);
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  }
}
