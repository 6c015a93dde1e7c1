import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes } from './concurrent-indexes.js';

/**
 * Trigger requests by env and due time, only while they wait (`pending` or `scheduled`): the
 * poller reads the requests due now and the expiry those past their TTL, each a range of this
 * index, so runs for later, retry backoffs and sleeps due tomorrow cost a poll nothing today.
 * Without it a poll walked every waiting request of its env in insertion order, due or not.
 * Built without stopping writes on a live table: see buildIndexes.
 */
export class CycliumDueRequests1764400000015 implements MigrationInterface {
  name = 'CycliumDueRequests1764400000015';

  async up(runner: QueryRunner): Promise<void> {
    await buildIndexes(runner, ['cyclium_trigger_requests'], INDEXES);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
  }
}

const INDEXES: ReadonlyArray<[string, string]> = [
  [
    'cyclium_trigger_requests_due',
    `cyclium_trigger_requests (source_env, (coalesce(not_before, inserted_at)), id) WHERE status ` +
      `IN ('pending', 'scheduled')`,
  ],
];
