import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * One row per executed `resource_rebalancer` step: the side effect the cluster tests count to tell
 * a step that ran twice (restart, stale holder) from one that ran once. Deliberately no unique key
 * on (episode_id, step_no): duplicates are what the tests look for.
 */
export class DemoRebalanceLog1764400000100 implements MigrationInterface {
  name = 'DemoRebalanceLog1764400000100';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE demo_rebalance_log (
        id bigserial PRIMARY KEY,
        episode_id uuid NOT NULL,
        step_no int NOT NULL,
        step text NOT NULL,
        node text NOT NULL,
        idempotency_key text NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
    await runner.query(
      `CREATE INDEX demo_rebalance_log_episode_id ON demo_rebalance_log (episode_id)`,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE demo_rebalance_log`);
  }
}
