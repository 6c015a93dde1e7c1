import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { DataSource, type MigrationInterface } from 'typeorm';
import { PostgresBus, busChannel } from '@cyclium/nestjs/adapters';
import { cycliumGrants, cycliumMigrations } from '@cyclium/nestjs/migrations';
import { emptyDatabase } from './support/database.js';

const suffix = `${process.pid}_${process.env.JEST_WORKER_ID ?? '0'}`;
const ROLE = `cyc_old_pub_${suffix}`;

async function migrate(url: string, migrations: Array<new () => MigrationInterface>) {
  const dataSource = new DataSource({ type: 'postgres', url, migrations, logging: false });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await dataSource.destroy();
  }
}

/**
 * A publisher-only service granted by a release before migration 26 (its column grants name no
 * `trace_context`): once the migration ran, this release's publish, which names the column, is
 * still allowed, because the migration extends those grants.
 */
describe('migration 26 and the grants of an existing publisher', () => {
  let url: string;
  let admin: pg.Pool;
  let publisher: pg.Pool;

  beforeAll(async () => {
    url = await emptyDatabase('trace_grants');
    admin = new pg.Pool({ connectionString: url, max: 1 });
    admin.on('error', () => undefined);
    // Every migration before 26, as the previous release had them.
    const before26 = cycliumMigrations.findIndex(
      (m) => m.name === 'CycliumTraceContext1764400000026',
    );
    await migrate(url, cycliumMigrations.slice(0, before26));
    await admin.query(`CREATE ROLE ${ROLE} LOGIN PASSWORD 'old-publisher'`);
    // The previous release's grants: this release's, without the column it did not have.
    for (const statement of cycliumGrants({ publisher: ROLE }))
      await admin.query(statement.replace(', trace_context', ''));
    await migrate(url, cycliumMigrations);
    const login = new URL(url);
    login.username = ROLE;
    login.password = 'old-publisher';
    publisher = new pg.Pool({ connectionString: login.toString(), max: 2 });
    publisher.on('error', () => undefined);
  }, 60_000);

  afterAll(async () => {
    await publisher?.end();
    await admin?.query(`DROP OWNED BY ${ROLE}`).catch(() => undefined);
    await admin?.query(`DROP ROLE IF EXISTS ${ROLE}`).catch(() => undefined);
    await admin?.end();
  });

  it('publishes through PostgresBus after the migration, without running the grants again', async () => {
    const { rows: before } = await admin.query(
      `SELECT has_column_privilege($1, 'cyclium_events', 'trace_context', 'INSERT') AS granted`,
      [ROLE],
    );
    expect(before[0].granted).toBe(true);
    const bus = new PostgresBus(publisher, () => ({ connectionString: url }), {
      channel: busChannel(null, null),
      publisher: () => 'old-publisher',
    });
    const event = await bus.publish('test.old_grant', { n: 1 });
    const { rows } = await admin.query(`SELECT type FROM cyclium_events WHERE event_id = $1`, [
      event.eventId,
    ]);
    expect(rows).toEqual([{ type: 'test.old_grant' }]);
  });
});
