import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The version of its expectation an episode started on (`@Expectation({ version })`), so only a
 * node hosting that version, or one that accepts it, resumes it. NULL: never started, or started on
 * code without a version (any node hosting the expectation runs it). Adding a nullable column
 * without a default rewrites nothing, and nothing indexes it: the statements that filter on it read
 * the rows they already select by other indexes.
 */
export class CycliumVersions1764400000024 implements MigrationInterface {
  name = 'CycliumVersions1764400000024';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_episodes ADD COLUMN version text`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN version`);
  }
}
