import { sameEnv } from '../scope/scope-predicates.js';
import type { SqlExecutor } from '../sql/sql-executor.js';

/**
 * The latest bucket a schedule trigger of `actorId.expectationId` started an episode for in `env`
 * (any status, archived included), or null when none is left. Read once per schedule at boot, by
 * a catch-up: through the (actor_id, status, inserted_at) index, the actor's rows only.
 */
export async function lastScheduledBucket(sql: SqlExecutor, actorId: string, expectationId: string, env: string | null): Promise<Date | null> {
  const { rows } = await sql.query<{ last: string | null }>(
    // ISO 8601 UTC to the millisecond, as every node writes it: text order is time order.
    `SELECT max(trigger_ref->>'scheduledAt') AS last FROM cyclium_episodes
      WHERE actor_id = $1 AND expectation_id = $2 AND trigger_type = 'schedule' AND ${sameEnv('source_env', '$3::text')}`,
    [actorId, expectationId, env],
  );
  const last = rows[0]?.last;
  return last ? new Date(last) : null;
}
