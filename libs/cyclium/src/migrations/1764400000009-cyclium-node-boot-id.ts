import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Each process that runs a node writes a random boot id of its own with its beat, so a second
 * live process under an identity that is already beating is told apart from the same process
 * (and refused at boot). A node that is going (draining) clears it; NULL also stands for rows
 * written before this column.
 */
export class CycliumNodeBootId1764400000009 implements MigrationInterface {
  name = 'CycliumNodeBootId1764400000009';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes ADD COLUMN boot_id uuid`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes DROP COLUMN boot_id`);
  }
}
