import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Bus events too large for one NOTIFY (PostgreSQL's payload limit is 8,000 bytes) travel by
 * reference: the publisher stores the event here, notifies its id, and every node loads it by id.
 * Rows are transient (publishers sweep them after an hour, by created_at), so nothing references
 * them.
 */
export class CycliumBusPayloads1764400000001 implements MigrationInterface {
  name = 'CycliumBusPayloads1764400000001';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_bus_payloads (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        event jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    await runner.query(
      `CREATE INDEX cyclium_bus_payloads_created_at ON cyclium_bus_payloads (created_at)`,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE cyclium_bus_payloads`);
  }
}
