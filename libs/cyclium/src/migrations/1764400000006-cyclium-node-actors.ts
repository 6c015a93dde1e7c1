import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The actors each node hosts, so the nodes that rank themselves for a bus event's trigger are only
 * those that can run it: a publisher-only service sharing the channel must not be first in line for
 * work it will never dispatch. NULL (a node from before this column) counts as hosting everything.
 */
export class CycliumNodeActors1764400000006 implements MigrationInterface {
  name = 'CycliumNodeActors1764400000006';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes ADD COLUMN actors text[]`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes DROP COLUMN actors`);
  }
}
