import { migrateDatabase, startPostgres, type RunningPostgres } from '@cyclium/nestjs/testing';
import pg from 'pg';

export interface BenchDatabase {
  url: string;
  close(): Promise<void>;
}

/**
 * A fresh, migrated `cyclium_bench` database on DATABASE_URL's server, or on an embedded
 * PostgreSQL started for this run (with pg_stat_statements loaded, so statements can be counted
 * by the server) and stopped by `close()`.
 */
export async function openBenchDatabase(): Promise<BenchDatabase> {
  let server: RunningPostgres | undefined;
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    server = await startPostgres({
      settings: {
        shared_preload_libraries: 'pg_stat_statements',
        'pg_stat_statements.track': 'all',
        'pg_stat_statements.track_planning': 'on',
      },
    });
    serverUrl = server.url;
    const stop = () => void server?.stop().finally(() => process.exit(130));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS cyclium_bench WITH (FORCE)');
  await admin.query('CREATE DATABASE cyclium_bench');
  await admin.end();
  const url = new URL(serverUrl);
  url.pathname = '/cyclium_bench';
  await migrateDatabase(url.toString());
  return { url: url.toString(), close: async () => server?.stop() };
}
