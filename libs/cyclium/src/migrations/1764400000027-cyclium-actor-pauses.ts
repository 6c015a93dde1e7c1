import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Actors paused cluster-wide by an operator, per stack and env (ActorPauses): a row while paused,
 * none once resumed. Every node of that scope reads them at each beat and when a pause is
 * announced, and starts nothing of a paused actor; its triggers wait as requests due now. A new,
 * empty table: nothing is rewritten. A node of the previous release does not read it, so it keeps
 * running a paused actor until it is replaced.
 */
export class CycliumActorPauses1764400000027 implements MigrationInterface {
  name = 'CycliumActorPauses1764400000027';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_actor_pauses (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        actor_id text NOT NULL,
        stack text,
        env text,
        paused_at timestamptz NOT NULL DEFAULT now(),
        paused_by text,
        reason text
      )`);
    // NULL (no stack, the default env) is one scope: the key reads it as ''.
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_actor_pauses_scope
        ON cyclium_actor_pauses (actor_id, (coalesce(stack, '')), (coalesce(env, '')))`);
    // Roles granted before this release (cycliumGrants) get the same rights on the new table as on
    // the node registry, or their nodes could not read it until the grants ran again.
    await runner.query(`
      DO $$
      DECLARE r record;
      BEGIN
        FOR r IN SELECT grantee, string_agg(privilege_type, ', ') AS privileges
                   FROM information_schema.role_table_grants
                  WHERE table_schema = current_schema() AND table_name = 'cyclium_nodes'
                    AND privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
                    AND grantee NOT IN (current_user, 'PUBLIC')
                  GROUP BY grantee
        LOOP
          EXECUTE format('GRANT %s ON cyclium_actor_pauses TO %I', r.privileges, r.grantee);
        END LOOP;
      END $$`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE cyclium_actor_pauses`);
  }
}
