import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The event type each position is for (one consumer, one expectation, one type), so retention holds
 * back, and counts as undispatched, only the events of a type some position has not passed. Before,
 * an idle consumer's position (stored about once a minute) held every type, and with windows under
 * a minute retention warned about events that consumer never wanted. Rows a previous release wrote
 * have no type: they hold every type, as before, until a node of this release stores them again.
 * Adding a nullable column without a default is catalog-only, however large the table.
 */
export class CycliumBusPositionTypes1764400000019 implements MigrationInterface {
  name = 'CycliumBusPositionTypes1764400000019';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_bus_positions ADD COLUMN type text`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_bus_positions DROP COLUMN type`);
  }
}
