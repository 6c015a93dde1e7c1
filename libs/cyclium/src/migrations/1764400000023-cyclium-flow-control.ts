import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes, validateConstraints } from './concurrent-indexes.js';

const EPISODE_STATUSES =
  `'queued', 'deferred', 'waiting', 'running', 'blocked', 'done', ` +
  `'partially_failed', 'failed', 'canceled'`;

/**
 * The rows of one expectation in one env (the function's parameters), aliased `e` or not. The env
 * is compared as `coalesce(…, '')` (no env is '', which no env may be named), the expression the
 * indexes hold: `IS NOT DISTINCT FROM` is NULL-safe too, but no index serves it, and the planner
 * then misjudges how many rows match and scans the table.
 */
const OF_EXPECTATION = (e: string) =>
  `${e}actor_id = p_actor AND ${e}expectation_id = p_expectation
   AND coalesce(${e}source_env, '') = coalesce(p_env, '')`;

/**
 * The one way a limited episode becomes `running` (FlowAdmissions): under a transaction-scoped
 * advisory lock per expectation and env, taken before anything is read, so each statement after it
 * reads a snapshot in which every earlier admission has committed. It counts the running episodes
 * (all of the expectation against `p_total`, each key's against `p_limit`) and the starts of the
 * rate window, then moves up to `p_max` throttled rows to running on `p_owner`, in turns: a key's
 * next row goes after the rows of keys with fewer running (round robin), then by priority, then
 * oldest. Rows whose rate key has no start left are passed over; the last row it returns then
 * carries no episode and `retry_ms`, the time until the earliest blocked window frees. A row
 * with a journal gets its `woken` marker (its quiet time starts anew) and answers `resumed`.
 */
export const ADMIT = `
  CREATE FUNCTION cyclium_flow_admit(
    p_actor text, p_expectation text, p_env text, p_owner text, p_max int,
    p_limit int, p_total int, p_rate int, p_period_ms double precision)
  RETURNS TABLE (episode cyclium_episodes, resumed boolean, retry_ms double precision)
  LANGUAGE plpgsql AS $$
  DECLARE
    v_now timestamptz;
    v_room int := p_max;
    v_period interval := make_interval(secs => coalesce(p_period_ms, 0) / 1000);
    v_left jsonb := '{}';
    v_key text;
    v_starts int;
    v_free_at timestamptz;
    v_retry timestamptz;
    v_admitted int := 0;
    v_row cyclium_episodes;
    r record;
  BEGIN
    IF p_max < 1 THEN RETURN; END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
      'cyclium_flow:' || p_actor || ':' || p_expectation || ':' || coalesce(p_env, '<null>'), 0));
    v_now := clock_timestamp();
    IF p_total IS NOT NULL THEN
      v_room := least(v_room, p_total - (SELECT count(*) FROM cyclium_episodes
                                          WHERE status = 'running' AND flow_key IS NOT NULL
                                            AND ${OF_EXPECTATION('')})::int);
    END IF;
    IF p_rate IS NOT NULL THEN
      DELETE FROM cyclium_flow_starts
       WHERE ${OF_EXPECTATION('')} AND started_at <= v_now - v_period;
    END IF;
    IF v_room < 1 THEN RETURN; END IF;
    FOR r IN
      WITH RECURSIVE keys (k) AS (
        (SELECT flow_key FROM cyclium_episodes
          WHERE status = 'throttled' AND flow_key IS NOT NULL AND ${OF_EXPECTATION('')}
          ORDER BY flow_key LIMIT 1)
        UNION ALL
        SELECT (SELECT flow_key FROM cyclium_episodes
                 WHERE status = 'throttled' AND flow_key > keys.k AND ${OF_EXPECTATION('')}
                 ORDER BY flow_key LIMIT 1)
          FROM keys WHERE keys.k IS NOT NULL),
      load AS (
        SELECT k, (SELECT count(*) FROM cyclium_episodes
                    WHERE status = 'running' AND flow_key = k AND ${OF_EXPECTATION('')})::int
                    AS running
          FROM keys WHERE k IS NOT NULL)
      SELECT c.id, c.rate_key, l.running + c.rank AS turn, c.priority, c.queued_at
        FROM load l
       CROSS JOIN LATERAL (
         -- The key's next rows first (an ordered index scan that stops at the limit), then their
         -- ranks: a window over every throttled row of a busy key would read them all.
         SELECT h.*, row_number() OVER (ORDER BY h.priority DESC, h.queued_at, h.id) AS rank
           FROM (SELECT e.id, e.rate_key, e.priority, e.queued_at
                   FROM cyclium_episodes e
                  WHERE e.status = 'throttled' AND e.flow_key = l.k AND ${OF_EXPECTATION('e.')}
                  ORDER BY e.priority DESC, e.queued_at, e.id
                  LIMIT greatest(0, CASE WHEN p_limit IS NULL THEN v_room
                                         ELSE least(v_room, p_limit - l.running) END)) h) c
       ORDER BY turn, c.priority DESC, c.queued_at, c.id
    LOOP
      IF p_rate IS NOT NULL THEN
        v_key := coalesce(r.rate_key, '');
        IF NOT v_left ? v_key THEN
          SELECT count(*)::int, min(started_at) + v_period INTO v_starts, v_free_at
            FROM cyclium_flow_starts
           WHERE ${OF_EXPECTATION('')} AND rate_key = v_key AND started_at > v_now - v_period;
          v_left := v_left || jsonb_build_object(v_key, p_rate - v_starts);
          IF p_rate - v_starts < 1 THEN v_retry := least(v_retry, v_free_at); END IF;
        END IF;
        CONTINUE WHEN (v_left ->> v_key)::int < 1;
      END IF;
      UPDATE cyclium_episodes
         SET status = 'running', owner_node = p_owner, phase = NULL,
             started_at = coalesce(started_at, v_now), updated_at = v_now
       WHERE id = r.id AND status = 'throttled'
      RETURNING * INTO v_row;
      CONTINUE WHEN NOT FOUND;
      IF p_rate IS NOT NULL THEN
        INSERT INTO cyclium_flow_starts (actor_id, expectation_id, source_env, rate_key, started_at)
        VALUES (p_actor, p_expectation, p_env, v_key, v_now);
        v_left := v_left || jsonb_build_object(v_key, (v_left ->> v_key)::int - 1);
        IF (v_left ->> v_key)::int < 1 THEN
          v_retry := least(v_retry, (SELECT min(started_at) + v_period FROM cyclium_flow_starts
                                      WHERE ${OF_EXPECTATION('')} AND rate_key = v_key
                                        AND started_at > v_now - v_period));
        END IF;
      END IF;
      episode := v_row;
      resumed := EXISTS (SELECT 1 FROM cyclium_episode_steps s WHERE s.episode_id = v_row.id);
      IF resumed THEN
        INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
        SELECT v_row.id, max(s.step_no) + 1, 'observation', 'woken',
               jsonb_build_object('event', 'woken', 'node', p_owner)
          FROM cyclium_episode_steps s WHERE s.episode_id = v_row.id
        ON CONFLICT (episode_id, step_no) DO NOTHING;
      END IF;
      retry_ms := NULL;
      RETURN NEXT;
      v_admitted := v_admitted + 1;
      EXIT WHEN v_admitted >= v_room;
    END LOOP;
    IF v_retry IS NOT NULL AND v_admitted < v_room THEN
      episode := NULL;
      resumed := false;
      retry_ms := greatest(0, extract(epoch FROM v_retry - clock_timestamp()) * 1000);
      RETURN NEXT;
    END IF;
  END $$`;

/**
 * Flow control: cluster-wide concurrency per expectation and per key, rate limits and priorities.
 * An episode over its limits waits `throttled` (a status the previous release never reads, so
 * only a node that enforces the limits starts it) with its partition (`flow_key`, the concurrency
 * key, and `rate_key`) and `priority` stored when it was triggered; cyclium_flow_admit is the one
 * statement that moves it to running. Starts of rate-limited expectations are counted in
 * cyclium_flow_starts for as long as their window lasts. The new columns' defaults are
 * catalog-only; the two indexes hold only limited rows that are running or throttled.
 */
export class CycliumFlowControl1764400000023 implements MigrationInterface {
  name = 'CycliumFlowControl1764400000023';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      ALTER TABLE cyclium_episodes
        ADD COLUMN flow_key text,
        ADD COLUMN rate_key text,
        ADD COLUMN priority integer NOT NULL DEFAULT 0`);
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP CONSTRAINT cyclium_episodes_status_check`,
    );
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD CONSTRAINT cyclium_episodes_status_check ` +
        `CHECK (status IN (${EPISODE_STATUSES}, 'throttled')) NOT VALID`,
    );
    // A throttled row without its partition would never be admitted.
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD CONSTRAINT cyclium_episodes_throttled_flow ` +
        `CHECK (status <> 'throttled' OR flow_key IS NOT NULL) NOT VALID`,
    );
    await runner.query(`
      CREATE TABLE cyclium_flow_starts (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        actor_id text NOT NULL,
        expectation_id text NOT NULL,
        source_env text,
        rate_key text NOT NULL,
        started_at timestamptz NOT NULL
      )`);
    await runner.query(
      `CREATE INDEX cyclium_flow_starts_window ON cyclium_flow_starts ` +
        `(actor_id, expectation_id, rate_key, started_at)`,
    );
    await runner.query(ADMIT);
    await validateConstraints(runner, CHECKS);
    await buildIndexes(runner, ['cyclium_episodes'], INDEXES);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
    await runner.query(
      `DROP FUNCTION cyclium_flow_admit(text, text, text, text, int, int, int, int, ` +
        `double precision)`,
    );
    await runner.query(`DROP TABLE cyclium_flow_starts`);
    await runner.query(
      `UPDATE cyclium_episodes SET status = 'queued', owner_node = NULL ` +
        `WHERE status = 'throttled'`,
    );
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP CONSTRAINT cyclium_episodes_throttled_flow, ` +
        `DROP CONSTRAINT cyclium_episodes_status_check`,
    );
    await runner.query(
      `ALTER TABLE cyclium_episodes ADD CONSTRAINT cyclium_episodes_status_check ` +
        `CHECK (status IN (${EPISODE_STATUSES}))`,
    );
    await runner.query(
      `ALTER TABLE cyclium_episodes DROP COLUMN flow_key, DROP COLUMN rate_key, ` +
        `DROP COLUMN priority`,
    );
  }
}

const CHECKS = [
  ['cyclium_episodes', 'cyclium_episodes_status_check'],
  ['cyclium_episodes', 'cyclium_episodes_throttled_flow'],
] as const;

/**
 * The admission's reads: throttled rows by key in their order (and the skip scan over their keys),
 * and running ones by key. Unlimited rows (flow_key NULL) enter neither.
 */
const INDEXES: ReadonlyArray<[string, string]> = [
  [
    'cyclium_episodes_flow_throttled',
    `cyclium_episodes (actor_id, expectation_id, (coalesce(source_env, '')), flow_key, ` +
      `priority DESC, queued_at, id) WHERE status = 'throttled' AND flow_key IS NOT NULL`,
  ],
  [
    'cyclium_episodes_flow_running',
    `cyclium_episodes (actor_id, expectation_id, (coalesce(source_env, '')), flow_key) ` +
      `WHERE status = 'running' AND flow_key IS NOT NULL`,
  ],
];
