import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Every cyclium_* table. Written by hand: the partial and NULLS NOT DISTINCT unique indexes carry
 * the library's guarantees, so their exact predicates matter more than what an ORM would generate.
 */
export class CycliumSchema1764400000000 implements MigrationInterface {
  name = 'CycliumSchema1764400000000';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_workflow_instances (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workflow_id text NOT NULL,
        status text NOT NULL CHECK (status IN ('running', 'blocked', 'done', 'failed', 'canceled')),
        step_states jsonb NOT NULL DEFAULT '{}'::jsonb,
        subject_value text,
        source_stack text,
        source_env text,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz
      )`);
    await runner.query(
      `CREATE INDEX cyclium_workflow_instances_status_stack ON cyclium_workflow_instances ` +
        `(status, source_stack)`,
    );
    await runner.query(
      `CREATE INDEX cyclium_workflow_instances_status_env ON cyclium_workflow_instances (status, ` +
        `source_env)`,
    );

    await runner.query(`
      CREATE TABLE cyclium_episodes (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        actor_id text NOT NULL,
        expectation_id text NOT NULL,
        trigger_type text NOT NULL,
        trigger_ref jsonb NOT NULL DEFAULT '{}'::jsonb,
        dedupe_key text,
        status text NOT NULL
          CHECK (status IN ('queued', 'running', 'blocked', 'done', 'partially_failed', 'failed',
                            'canceled')),
        phase text,
        attempts integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 3,
        error_class text,
        error_detail text,
        summary text,
        classification jsonb,
        owner_node text,
        workflow_instance_id uuid REFERENCES cyclium_workflow_instances (id) ON DELETE SET NULL,
        workflow_step_id text,
        source_stack text,
        source_env text,
        started_at timestamptz,
        finished_at timestamptz,
        queued_at timestamptz,
        archived_at timestamptz,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    // One live episode per trigger (rule 2); archived rows step outside the index.
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_episodes_dedupe_key_live ON cyclium_episodes (dedupe_key)
        WHERE dedupe_key IS NOT NULL AND archived_at IS NULL`);
    await runner.query(
      `CREATE INDEX cyclium_episodes_status_stack ON cyclium_episodes (status, source_stack)`,
    );
    await runner.query(
      `CREATE INDEX cyclium_episodes_status_env ON cyclium_episodes (status, source_env)`,
    );

    // The journal and checkpoints are written once per step, the hottest path there is: no foreign
    // key (each would add a trigger lookup and a row lock on the episode to every step). Episodes
    // are archived, never deleted, and only the runner writes these rows, for an episode it holds.
    await runner.query(`
      CREATE TABLE cyclium_episode_steps (
        episode_id uuid NOT NULL,
        step_no integer NOT NULL,
        kind text NOT NULL,
        name text NOT NULL,
        result_ref jsonb,
        error_class text,
        duration_ms integer,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (episode_id, step_no)
      )`);

    await runner.query(`
      CREATE TABLE cyclium_episode_checkpoints (
        episode_id uuid NOT NULL,
        checkpoint_no integer NOT NULL,
        phase text,
        schema_version integer NOT NULL DEFAULT 1,
        state jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (episode_id, checkpoint_no)
      )`);

    await runner.query(`
      CREATE TABLE cyclium_work_claims (
        dedupe_key text PRIMARY KEY,
        state text NOT NULL CHECK (state IN ('claimed', 'done', 'failed')),
        owner_node text NOT NULL,
        lease_until timestamptz NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now(),
        last_heartbeat_at timestamptz,
        finished_at timestamptz,
        attempt integer NOT NULL DEFAULT 1,
        fence bigint NOT NULL DEFAULT 1,
        work_type text,
        error_detail text
      )`);
    await runner.query(
      `CREATE INDEX cyclium_work_claims_state_lease ON cyclium_work_claims (state, lease_until)`,
    );

    await runner.query(`
      CREATE TABLE cyclium_findings (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        actor_id text NOT NULL,
        expectation_id text,
        finding_key text NOT NULL,
        status text NOT NULL CHECK (status IN ('active', 'cleared', 'superseded')),
        class text,
        severity text,
        subject text,
        summary text,
        evidence jsonb,
        raised_by_episode_id uuid REFERENCES cyclium_episodes (id) ON DELETE SET NULL,
        cleared_by_episode_id uuid REFERENCES cyclium_episodes (id) ON DELETE SET NULL,
        env text,
        raised_at timestamptz NOT NULL DEFAULT now(),
        cleared_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    // One active finding per key and env; the default env (NULL) is one env, not many.
    await runner.query(`
      CREATE UNIQUE INDEX cyclium_findings_active_key_env ON cyclium_findings (finding_key, env)
        NULLS NOT DISTINCT WHERE status = 'active'`);

    await runner.query(`
      CREATE TABLE cyclium_outputs (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        episode_id uuid NOT NULL REFERENCES cyclium_episodes (id) ON DELETE CASCADE,
        type text NOT NULL,
        dedupe_key text NOT NULL,
        status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
        payload jsonb,
        delivered_ref jsonb,
        error text,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        delivered_at timestamptz,
        CONSTRAINT cyclium_outputs_dedupe_key UNIQUE (dedupe_key)
      )`);

    await runner.query(`
      CREATE TABLE cyclium_trigger_requests (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        episode_id uuid NOT NULL REFERENCES cyclium_episodes (id) ON DELETE CASCADE,
        actor_id text NOT NULL,
        expectation_id text NOT NULL,
        source_node text NOT NULL,
        source_stack text,
        source_env text,
        status text NOT NULL DEFAULT 'pending'
          CHECK (status IN ('pending', 'claimed', 'completed', 'expired', 'failed')),
        opts jsonb NOT NULL DEFAULT '{}'::jsonb,
        claimed_by text,
        claimed_at timestamptz,
        error text,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz
      )`);
    await runner.query(
      `CREATE INDEX cyclium_trigger_requests_status ON cyclium_trigger_requests (status, ` +
        `inserted_at)`,
    );
    await runner.query(
      `CREATE INDEX cyclium_trigger_requests_status_env ON cyclium_trigger_requests (status, ` +
        `source_env, inserted_at)`,
    );

    await runner.query(`
      CREATE TABLE cyclium_actor_definitions (
        actor_id text PRIMARY KEY,
        expectations jsonb NOT NULL DEFAULT '[]'::jsonb,
        enabled boolean NOT NULL DEFAULT true,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);

    await runner.query(`
      CREATE TABLE cyclium_nodes (
        node_identity text PRIMARY KEY,
        stack text,
        env text,
        mode text NOT NULL,
        hostname text NOT NULL,
        pid integer NOT NULL,
        version text NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        last_seen_at timestamptz NOT NULL DEFAULT now()
      )`);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const table of [
      'cyclium_nodes',
      'cyclium_actor_definitions',
      'cyclium_trigger_requests',
      'cyclium_outputs',
      'cyclium_findings',
      'cyclium_work_claims',
      'cyclium_episode_checkpoints',
      'cyclium_episode_steps',
      'cyclium_episodes',
      'cyclium_workflow_instances',
    ]) {
      await runner.query(`DROP TABLE ${table}`);
    }
  }
}
