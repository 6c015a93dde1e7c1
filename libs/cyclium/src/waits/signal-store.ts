import type { SqlExecutor } from '../sql/sql-executor.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { WaitingFor } from '../episodes/wait.types.js';
import { asTraceContext, type TraceContext } from '../primitives/trace-context.js';

const TERMINAL = `('done', 'partially_failed', 'failed', 'canceled')`;

/**
 * Stores a signal for a live episode, its row locked first: a wait of that episode being decided
 * in another transaction commits before this goes on (and this statement then reads the row as
 * that wait left it), or starts after this commits (and finds the signal).
 */
const SEND = `
  WITH ep AS (
    SELECT id, status, waiting_for, source_stack, source_env FROM cyclium_episodes
     WHERE id = $1 FOR NO KEY UPDATE),
  sent AS (
    INSERT INTO cyclium_signals (episode_id, name, payload, sent_by, trace_context)
    SELECT id, $2, $3::jsonb, $4, $5::jsonb FROM ep WHERE status NOT IN ${TERMINAL}
    RETURNING id)
  SELECT ep.status, ep.waiting_for, ep.source_stack, ep.source_env,
         (SELECT id::text FROM sent) AS signal_id
    FROM ep`;

/**
 * Moves the episode's wait wake-up to now and tells the nodes (see the waits migration's
 * cyclium_wake_wait, which the database's own wake-ups share).
 */
const WAKE = `SELECT cyclium_wake_wait($1, $2, $3, $4)`;

/** The oldest undelivered signal of a name, delivered to the wait at step $3. */
const TAKE = `
  UPDATE cyclium_signals SET delivered_at = now(), delivered_step = $3
   WHERE id = (SELECT id FROM cyclium_signals
                WHERE episode_id = $1 AND name = $2 AND delivered_at IS NULL
                ORDER BY id LIMIT 1)
  RETURNING id::text AS id, payload, sent_at, trace_context`;

/** What a send found: the episode's status and wait then, and the signal's id when stored. */
export interface SentSignal {
  status: EpisodeStatus;
  waitingFor: WaitingFor | null;
  signalId: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
}

/** A delivered signal. */
export interface TakenSignal {
  id: string;
  payload: unknown;
  sentAt: Date;
  /** Where it was sent (the sender's active trace), if anywhere. */
  traceContext: TraceContext | undefined;
}

/** Every statement on cyclium_signals. */
export const SignalStore = {
  /** Null when no such episode. */
  async send(
    client: SqlExecutor,
    episodeId: string,
    name: string,
    payloadJson: string,
    sentBy: string,
    traceContext: TraceContext | undefined,
  ): Promise<SentSignal | null> {
    const { rows } = await client.query<{
      status: EpisodeStatus;
      waiting_for: WaitingFor | null;
      signal_id: string | null;
      source_stack: string | null;
      source_env: string | null;
    }>(SEND, [
      episodeId,
      name,
      payloadJson,
      sentBy,
      traceContext === undefined ? null : JSON.stringify(traceContext),
    ]);
    const row = rows[0];
    if (!row) return null;
    return {
      status: row.status,
      waitingFor: row.waiting_for,
      signalId: row.signal_id,
      sourceStack: row.source_stack,
      sourceEnv: row.source_env,
    };
  },

  async wake(client: SqlExecutor, episodeId: string, sent: SentSignal): Promise<void> {
    await client.query(WAKE, [
      episodeId,
      sent.waitingFor?.channel ?? null,
      sent.sourceStack,
      sent.sourceEnv,
    ]);
  },

  async take(
    client: SqlExecutor,
    episodeId: string,
    name: string,
    stepNo: number,
  ): Promise<TakenSignal | null> {
    const { rows } = await client.query<{
      id: string;
      payload: unknown;
      sent_at: Date;
      trace_context: unknown;
    }>(TAKE, [episodeId, name, stepNo]);
    const row = rows[0];
    if (!row) return null;
    const traceContext = asTraceContext(row.trace_context);
    return { id: row.id, payload: row.payload, sentAt: row.sent_at, traceContext };
  },
};

/** Retention: the signals of the episodes `due` (column `id`) lists. */
export function deleteSignalsOf(due: string): string {
  return `DELETE FROM cyclium_signals WHERE episode_id = ANY (ARRAY(SELECT id FROM ${due}))`;
}
