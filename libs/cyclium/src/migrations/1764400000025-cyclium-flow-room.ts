import type { MigrationInterface, QueryRunner } from 'typeorm';
import { admitWithVersions } from './1764400000024-cyclium-versions.js';

/** The rows of one expectation in one env, compared as in migration 23 (its indexes hold this). */
const OF_EXPECTATION = (e: string) =>
  `${e}actor_id = p_actor AND ${e}expectation_id = p_expectation
   AND coalesce(${e}source_env, '') = coalesce(p_env, '')`;

/**
 * The admission's lock (migration 23), one per expectation and env and held to the commit, taken
 * by `take` (pg_advisory_xact_lock, or its shared or non-blocking forms).
 */
const flowLock = (take: string) => `${take}(hashtextextended(
      'cyclium_flow:' || p_actor || ':' || p_expectation || ':' || coalesce(p_env, '<null>'), 0))`;

/** A throttled row of the expectation that a node running `p_versions` may start. */
const THROTTLED = `SELECT 1 FROM cyclium_episodes e
                    WHERE e.status = 'throttled' AND e.flow_key IS NOT NULL
                      AND ${OF_EXPECTATION('e.')}
                      AND (e.version IS NULL OR e.version = ANY(p_versions))`;

/**
 * What the limits of one expectation and env leave for a batch of fresh triggers, read under the
 * admission's lock (so every statement after it reads a snapshot in which every earlier admission
 * and direct start has committed, and none commits before this transaction does): `waiting` when a
 * throttled row this node may start exists (the fresh rows then queue behind it, and the
 * admission decides); otherwise the running episodes of the expectation (`total`, when it has a
 * total limit) and of each key in `p_keys`, and the starts in the current rate window of each rate
 * key in `p_rate_keys`, and the clock the window is read at. The caller inserts the rows that fit
 * as running in the same statement (ThrottledInserts): a trigger that the limits allow starts
 * without being written throttled first and updated.
 */
const ROOM = `
  CREATE FUNCTION cyclium_flow_room(
    p_actor text, p_expectation text, p_env text, p_total int, p_rate int,
    p_period_ms double precision, p_versions text[], p_keys text[], p_rate_keys text[])
  RETURNS TABLE (waiting boolean, now_at timestamptz, total int, running jsonb, starts jsonb)
  LANGUAGE plpgsql ROWS 1 AS $$
  DECLARE
    v_period interval := make_interval(secs => coalesce(p_period_ms, 0) / 1000);
  BEGIN
    PERFORM ${flowLock('pg_advisory_xact_lock')};
    now_at := clock_timestamp();
    waiting := EXISTS (${THROTTLED});
    IF waiting THEN RETURN NEXT; RETURN; END IF;
    IF p_total IS NOT NULL THEN
      total := (SELECT count(*) FROM cyclium_episodes
                 WHERE status = 'running' AND flow_key IS NOT NULL AND ${OF_EXPECTATION('')})::int;
    END IF;
    running := coalesce((
      SELECT jsonb_object_agg(k.k, (SELECT count(*) FROM cyclium_episodes
                                     WHERE status = 'running' AND flow_key = k.k
                                       AND ${OF_EXPECTATION('')}))
        FROM (SELECT DISTINCT unnest(p_keys) AS k) k WHERE k.k IS NOT NULL), '{}');
    IF p_rate IS NOT NULL THEN
      DELETE FROM cyclium_flow_starts
       WHERE ${OF_EXPECTATION('')} AND started_at <= now_at - v_period;
      starts := coalesce((
        SELECT jsonb_object_agg(k.k, (SELECT count(*) FROM cyclium_flow_starts
                                       WHERE ${OF_EXPECTATION('')} AND rate_key = k.k
                                         AND started_at > now_at - v_period))
          FROM (SELECT DISTINCT unnest(p_rate_keys) AS k) k WHERE k.k IS NOT NULL), '{}');
    END IF;
    RETURN NEXT;
  END $$`;

/**
 * Whether a throttled row that a node running `p_versions` may start exists, read after every
 * admission in flight has committed (a shared hold of the admission's lock, so such probes never
 * wait for each other): the look a limited episode's end makes, after that end committed, sees the
 * rows of any admission that counted the episode as still running. Without one, the look ends
 * here, in a statement that writes nothing.
 */
const BACKLOG = `
  CREATE FUNCTION cyclium_flow_backlog(
    p_actor text, p_expectation text, p_env text, p_versions text[])
  RETURNS boolean
  LANGUAGE plpgsql AS $$
  BEGIN
    PERFORM ${flowLock('pg_advisory_xact_lock_shared')};
    RETURN EXISTS (${THROTTLED});
  END $$`;

/**
 * Whether nothing of the expectation is throttled, asked by the end of one of its episodes in the
 * end's own statement, so that end needs no look afterwards (FlowQuiet). Read under a shared hold
 * of the admission's lock, kept to the end's commit: an admission that counted the episode as
 * running has committed before this reads (its throttled rows are seen), and one that comes after
 * waits for the end to commit (and counts the episode as ended). NULL when an admission holds the
 * lock now: this never waits (an end may hold row locks, and the lock of more than one
 * expectation), and the node then looks as it would without this.
 */
const QUIET = `
  CREATE FUNCTION cyclium_flow_quiet(p_actor text, p_expectation text, p_env text)
  RETURNS boolean
  LANGUAGE plpgsql AS $$
  BEGIN
    IF NOT ${flowLock('pg_try_advisory_xact_lock_shared')} THEN
      RETURN NULL;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM cyclium_episodes e
                        WHERE e.status = 'throttled' AND e.flow_key IS NOT NULL
                          AND ${OF_EXPECTATION('e.')});
  END $$`;

/**
 * The rows the planner expects from an admission (the default for a function returning a set is
 * 1,000). At 1,000, a statement that takes the claims of what it admitted hashes the whole claims
 * table instead of probing its key index for each row, a cost that grows with the table.
 */
const ADMITTED_ROWS = 4;

/**
 * The admission of migration 24, leaving at once when nothing it may start is throttled: the look
 * a limited episode's end makes (a place may have freed) then reads one index entry instead of
 * counting the running rows and walking the keys.
 */
function admitWithExit(): string {
  const before = '    v_now := clock_timestamp();\n';
  const admit = admitWithVersions();
  const withExit = admit
    .replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')
    .replace('LANGUAGE plpgsql AS', `LANGUAGE plpgsql ROWS ${ADMITTED_ROWS} AS`)
    .replace(before, `${before}    IF NOT EXISTS (${THROTTLED}) THEN RETURN; END IF;\n`);
  if (
    withExit.split('IF NOT EXISTS').length !== 2 ||
    !withExit.startsWith('\n  CREATE OR') ||
    !withExit.includes(`ROWS ${ADMITTED_ROWS}`)
  )
    throw new Error('CycliumFlowRoom1764400000025: the admission of migration 24 changed shape');
  return withExit;
}

/**
 * Fresh triggers of a limited expectation start as running in their insert when the limits allow
 * them and nothing is throttled ahead of them (cyclium_flow_room); a look for throttled rows reads
 * them under a shared hold of the admission's lock before it admits (cyclium_flow_backlog); and the
 * admission leaves at once when nothing is throttled (and is planned as returning a few rows). The
 * end of a limited episode asks whether anything is throttled in its own statement
 * (cyclium_flow_quiet), and looks only when it is.
 * Functions only: no table or index changes, and the previous release, which never calls the new
 * functions, runs against them unchanged (the admission keeps its signature).
 */
export class CycliumFlowRoom1764400000025 implements MigrationInterface {
  name = 'CycliumFlowRoom1764400000025';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(ROOM);
    await runner.query(BACKLOG);
    await runner.query(QUIET);
    await runner.query(admitWithExit());
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(
      admitWithVersions().replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION'),
    );
    await runner.query(`DROP FUNCTION cyclium_flow_quiet(text, text, text)`);
    await runner.query(`DROP FUNCTION cyclium_flow_backlog(text, text, text, text[])`);
    await runner.query(
      `DROP FUNCTION cyclium_flow_room(text, text, text, int, int, double precision, text[], ` +
        `text[], text[])`,
    );
  }
}
