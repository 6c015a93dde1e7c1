import { sameEnv } from '../scope/scope-predicates.js';
import type { SqlExecutor } from '../sql/sql-executor.js';

/** What the episodes tell of a schedule: the latest bucket that ran, and when they were read. */
export interface ScheduleHistory {
  /**
   * The latest bucket with an episode (any status, archived included), or null when none is left.
   */
  lastBucket: Date | null;
  /**
   * The database clock when the statement began, at or before its snapshot: an episode of a later
   * bucket this read did not see was written after it, so it ends, and is archived, after it too.
   */
  readAt: Date;
}

interface HistoryRow {
  last: string | null;
  read_at: Date;
}

/**
 * The schedule history of `actorId.expectationId` in `env`. Read once per schedule at boot, by a
 * catch-up: through the (actor_id, status, inserted_at) index, the actor's rows only.
 */
export async function scheduleHistory(
  sql: SqlExecutor,
  actorId: string,
  expectationId: string,
  env: string | null,
) {
  const { rows } = await sql.query<HistoryRow>(
    // ISO 8601 UTC to the millisecond, as every node writes it: text order is time order.
    `SELECT max(trigger_ref->>'scheduledAt') AS last, now() AS read_at FROM cyclium_episodes
      WHERE actor_id = $1 AND expectation_id = $2 AND trigger_type = 'schedule'
        AND ${sameEnv('source_env', '$3::text')}`,
    [actorId, expectationId, env],
  );
  // An aggregate: always one row.
  const { last, read_at: readAt } = rows[0] as HistoryRow;
  const history: ScheduleHistory = { lastBucket: last ? new Date(last) : null, readAt };
  return history;
}
