import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The `integrity` option signs episode rows too: a `signature` column on cyclium_episodes
 * (nullable, no default: adding it rewrites no table; NULL on rows of nodes that do not sign). And
 * the record of when a scope's nodes began refusing unsigned rows (`cyclium_integrity_cutovers`,
 * one row per stack and env): until it is written, nodes with the option accept the unsigned rows
 * of nodes without it, so the option can be turned on in a live system; the node that writes it
 * signs, in the same transaction, every unsigned row still in flight (IntegrityCutover).
 */
export class CycliumEpisodeSignatures1764400000020 implements MigrationInterface {
  name = 'CycliumEpisodeSignatures1764400000020';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_episodes ADD COLUMN signature text`);
    await runner.query(`
      CREATE TABLE cyclium_integrity_cutovers (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        source_stack text,
        source_env text,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        recorded_by text NOT NULL,
        signed_rows integer NOT NULL DEFAULT 0
      )`);
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_integrity_cutovers_scope
        ON cyclium_integrity_cutovers ((coalesce(source_stack, '')), (coalesce(source_env, '')))`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE cyclium_integrity_cutovers`);
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN signature`);
  }
}
