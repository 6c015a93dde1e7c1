import { describe, expect, it } from '@jest/globals';
import { CycliumRetention1764400000013, cycliumMigrations } from '@cyclium/nestjs/migrations';
import pg from 'pg';
import { DataSource, type Logger } from 'typeorm';
import { emptyDatabase } from './support/database.js';

/** The indexes migration 13 adds (retention's), by name. */
const RETENTION_INDEXES = [
  'cyclium_episodes_unarchived',
  'cyclium_episodes_archived',
  'cyclium_episodes_workflow_instance',
  'cyclium_trigger_requests_episode',
  'cyclium_findings_raised_by',
  'cyclium_findings_cleared_by',
  'cyclium_workflow_instances_finished',
  'cyclium_episodes_inserted',
  'cyclium_episodes_actor_status_inserted',
];

/** Runs the first `count` migrations not yet applied, in one transaction (TypeORM's default), returning every statement sent. */
async function migrate(url: string, count = cycliumMigrations.length): Promise<string[]> {
  const queries: string[] = [];
  const logger: Logger = {
    logQuery: (query) => queries.push(query),
    logQueryError: () => undefined,
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: cycliumMigrations.slice(0, count),
    logging: ['query'],
    logger,
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations({ transaction: 'all' });
  } finally {
    await dataSource.destroy();
  }
  return queries;
}

async function validIndexes(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indisvalid AND c.relname = ANY($1::text[]) ORDER BY 1`,
      [RETENTION_INDEXES],
    );
    return rows.map((r) => r.name);
  } finally {
    await client.end();
  }
}

/**
 * Retention's indexes go on tables a live cluster writes all the time: on a large table each one is
 * built CONCURRENTLY (no lock that stops writes for the build), which PostgreSQL allows only outside
 * a transaction, so the migration commits the transaction TypeORM opened around it first; on a small
 * table (a new install) it is built inside it.
 */
describe('migrations 13 and 14 build indexes and validate checks without stopping writes', () => {
  it('builds each index CONCURRENTLY, outside a transaction, on a table of 150,000 episodes', async () => {
    const url = await emptyDatabase('concurrent_indexes');
    await migrate(url, cycliumMigrations.indexOf(CycliumRetention1764400000013));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`
        INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, status, finished_at)
        SELECT 'a', 'e', 'manual', 'done', now() - make_interval(secs => g) FROM generate_series(1, 150000) g`);
      await client.query('ANALYZE cyclium_episodes');
    } finally {
      await client.end();
    }
    const queries = await migrate(url);
    for (const name of RETENTION_INDEXES)
      expect(queries).toContainEqual(
        expect.stringMatching(new RegExp(`^CREATE INDEX CONCURRENTLY ${name} ON`)),
      );
    const firstBuild = queries.findIndex((q) => q.startsWith('CREATE INDEX CONCURRENTLY'));
    expect(queries.slice(0, firstBuild)).toContain('COMMIT');
    expect(await validIndexes(url)).toEqual([...RETENTION_INDEXES].sort());
    // Migrations 14 and 23 validate their status checks outside the transaction that added them
    // NOT VALID (the last one to do so is checked).
    const added = queries.findLastIndex((q) => / ADD CONSTRAINT .* NOT VALID$/.test(q));
    const validated = queries.lastIndexOf(
      'ALTER TABLE cyclium_episodes VALIDATE CONSTRAINT cyclium_episodes_status_check',
    );
    expect(added).toBeGreaterThan(firstBuild);
    expect(validated).toBeGreaterThan(added);
    expect(queries.slice(added, validated)).toContain('COMMIT');
  });

  it('builds them inside the migration transaction on a new install', async () => {
    const url = await emptyDatabase('plain_indexes');
    const queries = await migrate(url);
    for (const name of RETENTION_INDEXES)
      expect(queries).toContainEqual(expect.stringMatching(new RegExp(`^CREATE INDEX ${name} ON`)));
    expect(await validIndexes(url)).toEqual([...RETENTION_INDEXES].sort());
  });
});
