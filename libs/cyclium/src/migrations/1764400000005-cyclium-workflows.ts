import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Workflows: an instance keeps its input (steps build theirs from it on whichever node advances)
 * and a version every advance bumps, so an advance is one conditional UPDATE and a replayed event
 * cannot apply twice. One live instance per workflow and subject in each stack and env: the unique
 * index makes concurrent starts for one subject meet on a single row (coalesce, because NULL is the
 * default stack and env and must collide with itself; an empty slug is never stored). A trigger
 * request may wait until `not_before`, which is how a step's retry backs off without a timer
 * anyone has to survive.
 */
export class CycliumWorkflows1764400000005 implements MigrationInterface {
  name = 'CycliumWorkflows1764400000005';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      ALTER TABLE cyclium_workflow_instances
        ADD COLUMN input jsonb NOT NULL DEFAULT '{}'::jsonb,
        ADD COLUMN version integer NOT NULL DEFAULT 0,
        ADD COLUMN error text`);
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_workflow_instances_live_subject
        ON cyclium_workflow_instances (workflow_id, subject_value, coalesce(source_stack, ''),
                                       coalesce(source_env, ''))
        WHERE subject_value IS NOT NULL AND status IN ('running', 'blocked')`);
    await runner.query(`ALTER TABLE cyclium_trigger_requests ADD COLUMN not_before timestamptz`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_trigger_requests DROP COLUMN not_before`);
    await runner.query(`DROP INDEX cyclium_workflow_instances_live_subject`);
    await runner.query(
      `ALTER TABLE cyclium_workflow_instances DROP COLUMN error, DROP COLUMN version, DROP ` +
        `COLUMN input`,
    );
  }
}
