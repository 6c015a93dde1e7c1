import { EPISODE_STATUSES } from '../entities/episode.entity.js';
import { sameEnv, sameStack } from '../scope/scope-predicates.js';
import type { SqlExecutor } from '../sql/sql-executor.js';

/**
 * Which event-caused episodes to look back over: one expectation's, in one stack and env, for one
 * subject.
 */
export interface EventFireQuery {
  actorId: string;
  expectationId: string;
  stack: string | null;
  env: string | null;
  /** The bus channel its events are stored on (their committed times tell when each fired). */
  channel: string;
  /**
   * The subject key's path into the payload and the subject's value there (undefined: missing);
   * none: every event.
   */
  subject?: { path: string[]; value: unknown };
  /**
   * The event asking, by the database clock: a fire at or before it, and within `withinMs` of it,
   * counts.
   */
  at: number;
  withinMs: number;
  debounceMs: number;
  /**
   * The asking event's own episode (a replay of an event that already fired) is not a fire before
   * it.
   */
  eventId: string;
}

/**
 * When the latest episode of an expectation's subject fired, by the database clock: its event's
 * committed time plus the debounce (a window fires at its last event's time plus `debounceMs`,
 * as every node computes it), or its insert time when the event has been pruned. Through the
 * (actor_id, status, inserted_at) index, over the episodes inserted within the window only. The
 * subject is compared as a JSON value: a subject that is the number 1 in one event and the string
 * "1" in another is two subjects here (one in memory, which compares them as text).
 */
const LAST_FIRE = `
  SELECT (extract(epoch FROM max(f.fired_at)) * 1000)::float8 AS fired_ms
    FROM (SELECT coalesce(v.created_at + make_interval(secs => $8::float8 / 1000),
                          e.inserted_at) AS fired_at
            FROM cyclium_episodes e
            LEFT JOIN cyclium_events v ON v.channel = $5 AND v.event_id = e.trigger_ref->>'eventId'
           WHERE e.actor_id = $1 AND e.status = ANY($11::text[]) AND e.expectation_id = $2
             AND e.trigger_type = 'event'
             AND ${sameStack('e.source_stack', '$3::text')}
             AND ${sameEnv('e.source_env', '$4::text')}
             AND e.inserted_at
               >= to_timestamp($6::float8 / 1000) - make_interval(secs => $7::float8 / 1000)
             AND e.trigger_ref->>'eventId' IS DISTINCT FROM $12
             AND ($9::text[] IS NULL
                  OR (e.trigger_ref->'payload') #> $9::text[] IS NOT DISTINCT FROM $10::jsonb)) f
   WHERE f.fired_at <= to_timestamp($6::float8 / 1000)`;

/**
 * Slack on the insert-time bound: an episode is inserted when its trigger fires, give or take a
 * clock estimate.
 */
const INSERT_SLACK_MS = 60_000;

/**
 * The latest fire of the subject at or before `at` and within `withinMs` of it (epoch ms, database
 * clock), or null.
 */
export async function lastEventFire(
  sql: SqlExecutor,
  query: EventFireQuery,
): Promise<number | null> {
  const { subject } = query;
  const value = subject?.value === undefined ? null : JSON.stringify(subject.value);
  const { rows } = await sql.query<{ fired_ms: number | null }>(LAST_FIRE, [
    query.actorId,
    query.expectationId,
    query.stack,
    query.env,
    query.channel,
    query.at,
    query.withinMs + query.debounceMs + INSERT_SLACK_MS,
    query.debounceMs,
    subject?.path ?? null,
    value,
    EPISODE_STATUSES,
    query.eventId,
  ]);
  const fired = rows[0]?.fired_ms ?? null;
  return fired !== null && fired >= query.at - query.withinMs ? fired : null;
}
