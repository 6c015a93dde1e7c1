import type { MigrationInterface, QueryRunner } from 'typeorm';
import { validateConstraints } from './concurrent-indexes.js';

const EPISODE_STATUSES =
  `'queued', 'deferred', 'running', 'blocked', 'done', ` +
  `'partially_failed', 'failed', 'canceled'`;
const REQUEST_STATUSES = `'pending', 'claimed', 'completed', 'expired', 'failed'`;

/**
 * Retries with backoff: an episode waiting out a backoff is `waiting` (its own status: no terminal
 * event, no slot, invisible to the orphan sweep) with a trigger request `scheduled` for its due
 * time, a status the previous release never reads, so only a node that knows retries resumes it;
 * `retries` counts the failed attempts. The constraints are added `NOT VALID` and validated
 * after, outside the migration's transaction on a large table (validateConstraints), so the scan
 * does not hold writes back; the column's constant default is catalog-only.
 */
export class CycliumRetries1764400000014 implements MigrationInterface {
  name = 'CycliumRetries1764400000014';

  async up(runner: QueryRunner): Promise<void> {
    await replaceCheck(
      runner,
      'cyclium_episodes',
      'cyclium_episodes_status_check',
      `${EPISODE_STATUSES}, 'waiting'`,
    );
    await replaceCheck(
      runner,
      'cyclium_trigger_requests',
      'cyclium_trigger_requests_status_check',
      `${REQUEST_STATUSES}, 'scheduled'`,
    );
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD COLUMN retries integer NOT NULL DEFAULT 0`,
    );
    await validateConstraints(runner, CHECKS);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(
      `UPDATE cyclium_trigger_requests SET status = 'pending' WHERE status = 'scheduled'`,
    );
    await runner.query(`UPDATE cyclium_episodes SET status = 'deferred' WHERE status = 'waiting'`);
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN retries`);
    await replaceCheck(
      runner,
      'cyclium_trigger_requests',
      'cyclium_trigger_requests_status_check',
      REQUEST_STATUSES,
    );
    await replaceCheck(
      runner,
      'cyclium_episodes',
      'cyclium_episodes_status_check',
      EPISODE_STATUSES,
    );
    await validateConstraints(runner, CHECKS);
  }
}

const CHECKS = [
  ['cyclium_episodes', 'cyclium_episodes_status_check'],
  ['cyclium_trigger_requests', 'cyclium_trigger_requests_status_check'],
] as const;

/**
 * The status check of `table`, replaced `NOT VALID`: rows written from now on are checked;
 * validateConstraints checks the rest.
 */
async function replaceCheck(
  runner: QueryRunner,
  table: string,
  name: string,
  statuses: string,
): Promise<void> {
  await runner.query(`ALTER TABLE ${table} DROP CONSTRAINT ${name}`);
  await runner.query(
    `ALTER TABLE ${table} ADD CONSTRAINT ${name} CHECK (status IN (${statuses})) NOT VALID`,
  );
}
