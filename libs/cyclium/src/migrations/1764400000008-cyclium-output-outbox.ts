import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Outputs become an outbox: a pending row is delivered by whichever live node hosts its adapter,
 * not only by the node that converged. A node takes a row with one conditional UPDATE that counts
 * the attempt, names itself in `lease_owner` and moves `next_attempt_at` to the end of its lease,
 * so the row is due again only when that lease runs out (the node died or hung) or when the node
 * writes the next try's time after a failure. One "due" column keeps the scan a single range on
 * one index: the partial index matches the scan's predicate exactly, `type` included so the types
 * a node does not host are skipped inside the index. Rows already pending are due at once.
 */
export class CycliumOutputOutbox1764400000008 implements MigrationInterface {
  name = 'CycliumOutputOutbox1764400000008';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      ALTER TABLE cyclium_outputs
        ADD COLUMN attempts int NOT NULL DEFAULT 0,
        ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
        ADD COLUMN lease_owner text`);
    await runner.query(
      `CREATE INDEX cyclium_outputs_due ON cyclium_outputs (next_attempt_at, type) WHERE status ` +
        `= 'pending'`,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP INDEX cyclium_outputs_due`);
    await runner.query(`
      ALTER TABLE cyclium_outputs
        DROP COLUMN lease_owner,
        DROP COLUMN next_attempt_at,
        DROP COLUMN attempts`);
  }
}
