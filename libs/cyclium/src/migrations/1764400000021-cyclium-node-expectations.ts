import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The expectations each node hosts, by actor (`{ actor: [expectation, …] }`), so "no node hosts
 * this work" (recovery's not_hosted) is decided at the expectation's grain: a release that dropped
 * an expectation but kept its actor must not keep that expectation's work waiting forever. NULL (a
 * node from before this column) declares every expectation of the actors it lists.
 */
export class CycliumNodeExpectations1764400000021 implements MigrationInterface {
  name = 'CycliumNodeExpectations1764400000021';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes ADD COLUMN expectations jsonb`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes DROP COLUMN expectations`);
  }
}
