import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Rows carry the stack and env they belong to where they did not yet.
 *
 * Actor definitions move to `cyclium_actor_scopes`, one row per actor, stack and env: keyed by the
 * actor alone, an `rc` node (or an old release mid-deploy) overwrote the recovery policy every
 * other stack and env read. `cyclium_actor_definitions` stays as it was for nodes of the previous
 * release, which still write it; this release reads it only when its scope has no row yet. The
 * unique index compares NULL stacks and envs as equal (coalesce), as the workflow instances' does.
 *
 * Outputs are stamped with their episode's stack and env.
 */
export class CycliumScopedRows1764400000010 implements MigrationInterface {
  name = 'CycliumScopedRows1764400000010';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_actor_scopes (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        actor_id text NOT NULL,
        source_stack text,
        source_env text,
        expectations jsonb NOT NULL DEFAULT '[]'::jsonb,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_actor_scopes_key
        ON cyclium_actor_scopes (actor_id, coalesce(source_env, ''), coalesce(source_stack, ''))`);
    await runner.query(
      `ALTER TABLE cyclium_outputs ADD COLUMN source_stack text, ADD COLUMN source_env text`,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(
      `ALTER TABLE cyclium_outputs DROP COLUMN source_env, DROP COLUMN source_stack`,
    );
    await runner.query(`DROP TABLE cyclium_actor_scopes`);
  }
}
