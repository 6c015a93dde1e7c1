import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Trigger-only mode: an episode a trigger-only node creates waits as `deferred` (its own status,
 * so recovery never mistakes it for a stale running one) until a full node takes its trigger
 * request. A request outlives its episode row on purpose: one whose episode was deleted is failed
 * with that reason, not silently deleted with it.
 */
export class CycliumTriggerOnly1764400000004 implements MigrationInterface {
  name = 'CycliumTriggerOnly1764400000004';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP CONSTRAINT cyclium_episodes_status_check`,
    );
    await runner.query(`
      ALTER TABLE cyclium_episodes ADD CONSTRAINT cyclium_episodes_status_check
        CHECK (status IN ('queued', 'deferred', 'running', 'blocked', 'done', 'partially_failed',
                          'failed', 'canceled'))`);
    await runner.query(
      `ALTER TABLE cyclium_trigger_requests DROP CONSTRAINT ` +
        `cyclium_trigger_requests_episode_id_fkey`,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(
      `DELETE FROM cyclium_trigger_requests r WHERE NOT EXISTS (SELECT 1 FROM cyclium_episodes e ` +
        `WHERE e.id = r.episode_id)`,
    );
    await runner.query(`
      ALTER TABLE cyclium_trigger_requests ADD CONSTRAINT cyclium_trigger_requests_episode_id_fkey
        FOREIGN KEY (episode_id) REFERENCES cyclium_episodes (id) ON DELETE CASCADE`);
    await runner.query(`UPDATE cyclium_episodes SET status = 'queued' WHERE status = 'deferred'`);
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP CONSTRAINT cyclium_episodes_status_check`,
    );
    await runner.query(`
      ALTER TABLE cyclium_episodes ADD CONSTRAINT cyclium_episodes_status_check
        CHECK (status IN ('queued', 'running', 'blocked', 'done', 'partially_failed', 'failed',
                          'canceled'))`);
  }
}
