import { afterAll, beforeAll } from '@jest/globals';
import pg from 'pg';

const TEMPLATE = 'cyclium_test_template';

/** The server the run uses: DATABASE_URL, or the embedded one global-setup started. */
export function serverUrl(): string {
  const url = process.env.CYCLIUM_TEST_SERVER_URL;
  if (!url)
    throw new Error(
      'CYCLIUM_TEST_SERVER_URL is not set: run the tests through jest.config.js (npm test)',
    );
  return url;
}

export function databaseUrl(database: string): string {
  const url = new URL(serverUrl());
  url.pathname = `/${database}`;
  return url.toString();
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * This Jest worker's database, recreated from the migrated template for each test file that asks,
 * so files never see each other's rows and never wait on each other's locks.
 */
export async function freshDatabase(): Promise<string> {
  const name = `cyclium_test_w${process.env.JEST_WORKER_ID ?? '0'}`;
  await admin(async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${name} TEMPLATE ${TEMPLATE}`);
  });
  return databaseUrl(name);
}

/** An unmigrated database, for tests of the migrations themselves. */
export async function emptyDatabase(suffix: string): Promise<string> {
  const name = `cyclium_test_empty_${suffix}_w${process.env.JEST_WORKER_ID ?? '0'}`;
  await admin(async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${name}`);
  });
  return databaseUrl(name);
}

/** A small pool on `url`, closed by the caller; an idle client the server drops is replaced, not a crash of the run. */
export function pool(url: string, max = 4): pg.Pool {
  const created = new pg.Pool({ connectionString: url, max });
  created.on('error', () => undefined);
  return created;
}

export interface TestDatabase {
  /** This file's database (fresh from the template), set once `beforeAll` has run. */
  readonly url: string;
  /** A small pool on it, closed in `afterAll`. */
  readonly db: pg.Pool;
}

/** Registers the usual hooks: a fresh database and a pool before the file's tests, closed after. */
export function useDatabase(poolSize = 2): TestDatabase {
  const handle = {} as { url: string; db: pg.Pool };
  beforeAll(async () => {
    handle.url = await freshDatabase();
    handle.db = pool(handle.url, poolSize);
  });
  afterAll(async () => {
    await handle.db?.end();
  });
  return handle;
}
