// Runs once per `jest` run, in Jest's own process, against the compiled library (npm test builds
// first). Starts embedded PostgreSQL unless DATABASE_URL is set, and migrates a template database
// that every test file clones (see database.ts), with the demo app's migrations on top.
import { migrateDatabase, startPostgres } from '@cyclium/nestjs/testing';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import pg from 'pg';

export const TEMPLATE = 'cyclium_test_template';

export default async function globalSetup() {
  let url = process.env.DATABASE_URL;
  if (!url) {
    // No fsync: the tests' commits still reach the kernel before they are acknowledged, so a
    // killed or restarted server (tests that do so start servers of their own) loses nothing; only
    // a crash of this machine could, which ends the run anyway. Flushes queue behind each other on
    // this shared server under three workers: the quick project runs in 62 s against 77.
    const postgres = await startPostgres({ settings: { fsync: 'off', full_page_writes: 'off' } });
    globalThis.__cycliumPostgres = postgres;
    url = postgres.url;
  }
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${TEMPLATE}`);
  } finally {
    await admin.end();
  }
  const template = new URL(url);
  template.pathname = `/${TEMPLATE}`;
  await migrateDatabase(template.toString());
  // The demo app's own table, for the cluster tests that run real demo nodes.
  await migrateDemoDatabase(template.toString());
  // Jest workers inherit this process's environment.
  process.env.CYCLIUM_TEST_SERVER_URL = url;
}
