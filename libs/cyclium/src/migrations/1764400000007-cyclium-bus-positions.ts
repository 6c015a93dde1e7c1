import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Where each consumer of a channel (one per event-triggered expectation) has dispatched up to, so a
 * node that boots, under any identity, dispatches what committed while nobody read instead of
 * starting at "now". `position` is a snapshot: every event of the channel visible in it has been
 * dispatched for that consumer. Retention keeps events no position has passed (up to a bound).
 */
export class CycliumBusPositions1764400000007 implements MigrationInterface {
  name = 'CycliumBusPositions1764400000007';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_bus_positions (
        channel text NOT NULL,
        consumer text NOT NULL,
        position pg_snapshot NOT NULL,
        skipped bigint NOT NULL DEFAULT 0,
        last_skip text,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (channel, consumer)
      )`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE cyclium_bus_positions`);
  }
}
