import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Where a trace crosses the database: the W3C trace context (`{ traceparent, tracestate? }`) a bus
 * event was published in, and the one a workflow instance was started in, so that the episodes
 * they trigger, on any node and however late, continue that trace (an episode keeps its own in its
 * trigger); and the one a signal was sent in, which the wait that takes it links to. NULL outside
 * any trace, and for every row a node of an earlier release writes.
 * Adding a nullable column without a default rewrites nothing, and nothing indexes it.
 */
export class CycliumTraceContext1764400000026 implements MigrationInterface {
  name = 'CycliumTraceContext1764400000026';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_events ADD COLUMN trace_context jsonb`);
    // A publisher's grants name the columns it may set (cycliumGrants): every role that may insert
    // an event's payload may set its trace context too, or this release's publish, which names the
    // column, would be refused until the grants ran again.
    await runner.query(`
      DO $$
      DECLARE r record;
      BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.column_privileges
                  WHERE table_schema = current_schema() AND table_name = 'cyclium_events'
                    AND column_name = 'payload' AND privilege_type = 'INSERT'
                    AND grantee NOT IN (current_user, 'PUBLIC')
        LOOP
          EXECUTE format('GRANT INSERT (trace_context) ON cyclium_events TO %I', r.grantee);
        END LOOP;
      END $$`);
    await runner.query(`ALTER TABLE cyclium_workflow_instances ADD COLUMN trace_context jsonb`);
    await runner.query(`ALTER TABLE cyclium_signals ADD COLUMN trace_context jsonb`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_signals DROP COLUMN trace_context`);
    await runner.query(`ALTER TABLE cyclium_workflow_instances DROP COLUMN trace_context`);
    await runner.query(`ALTER TABLE cyclium_events DROP COLUMN trace_context`);
  }
}
