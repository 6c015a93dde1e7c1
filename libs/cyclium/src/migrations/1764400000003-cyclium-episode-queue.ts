import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The table is the queue: a node takes its next queued episode of an actor, oldest first, when a
 * slot frees, so the partial index matches that statement's predicate exactly. A cancel is a
 * durable request on the row, which the running node reads back with its next step.
 */
export class CycliumEpisodeQueue1764400000003 implements MigrationInterface {
  name = 'CycliumEpisodeQueue1764400000003';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_episodes ADD COLUMN cancel_requested_at timestamptz`);
    await runner.query(`
      CREATE INDEX cyclium_episodes_queue ON cyclium_episodes (owner_node, actor_id, queued_at, id)
        WHERE status = 'queued'`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP INDEX cyclium_episodes_queue`);
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN cancel_requested_at`);
  }
}
