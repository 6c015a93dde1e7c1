import type { SqlExecutor } from '../sql/sql-executor.js';
import type { MatchValue, WaitedEvent } from '../episodes/wait.types.js';

/**
 * Taken before an event wait is registered, until its transaction ends: the exclusive lock per
 * channel and type waits for every event of that type being stored right now (their match trigger
 * holds it shared until they commit), so each event either committed before this wait did, or its
 * trigger sees the wait.
 */
const LOCK = `
  SELECT pg_advisory_xact_lock(hashtext('cyclium_event_waits'), hashtext($1 || '/' || $2))`;

/** The shape (the set of fields matched on) is what the match trigger looks up per event. */
const REGISTER = [
  `INSERT INTO cyclium_event_wait_shapes (channel, event_type, fields) VALUES ($1, $2, $3)
   ON CONFLICT DO NOTHING`,
  `INSERT INTO cyclium_event_waits (episode_id, step_no, channel, event_type, fields, match)
   VALUES ($4, $5, $1, $2, $3, $6::jsonb)
   ON CONFLICT (episode_id, step_no) DO NOTHING`,
] as const;

const MATCHED = `
  DELETE FROM cyclium_event_waits WHERE episode_id = $1 AND step_no = $2 AND event_row IS NOT NULL
  RETURNING event`;

const DROP = `DELETE FROM cyclium_event_waits WHERE episode_id = $1 AND step_no = $2`;

/** The sorted field names of a match: a shape, one per distinct set. */
export function shapeOf(match: Readonly<Record<string, MatchValue>>): string[] {
  return Object.keys(match).sort();
}

/** Every statement on cyclium_event_waits and cyclium_event_wait_shapes. */
export const EventWaitStore = {
  /** See LOCK: before the episode's row is locked, as a host's publish takes them in that order. */
  async lock(client: SqlExecutor, channel: string, type: string): Promise<void> {
    await client.query(LOCK, [channel, type]);
  },

  /** Inside the transaction that took `lock`. */
  async register(
    client: SqlExecutor,
    wait: {
      channel: string;
      type: string;
      episodeId: string;
      stepNo: number;
      match: Readonly<Record<string, MatchValue>>;
    },
  ): Promise<void> {
    const [shape, row] = REGISTER;
    const fields = shapeOf(wait.match);
    await client.query(shape, [wait.channel, wait.type, fields]);
    await client.query(row, [
      wait.channel,
      wait.type,
      fields,
      wait.episodeId,
      wait.stepNo,
      JSON.stringify(wait.match),
    ]);
  },

  /** The event that matched the wait at `stepNo`, its row gone with it; null when none yet. */
  async matched(
    client: SqlExecutor,
    episodeId: string,
    stepNo: number,
  ): Promise<WaitedEvent | null> {
    const { rows } = await client.query<{ event: WaitedEvent }>(MATCHED, [episodeId, stepNo]);
    return rows[0]?.event ?? null;
  },

  /** A wait that ended without its event (its deadline). */
  async drop(client: SqlExecutor, episodeId: string, stepNo: number): Promise<void> {
    await client.query(DROP, [episodeId, stepNo]);
  },
};

/** Retention: the event waits of the episodes `due` (column `id`) lists. */
export function deleteEventWaitsOf(due: string): string {
  return `DELETE FROM cyclium_event_waits WHERE episode_id = ANY (ARRAY(SELECT id FROM ${due}))`;
}
