import type { SqlExecutor } from '../sql/sql-executor.js';
import type { EpisodeRow } from './episode-context.interface.js';

/**
 * Why an episode waits for a wake-up: a retry's backoff, an `ep.sleep`, a resume due now (an
 * operator's retry, a restart handed to a full node), or a wait's deadline (a signal, an event or
 * children move it to now).
 */
export type WakeReason = 'retry' | 'sleep' | 'resume' | 'wait';

/**
 * Where a retry's wake-up is written (the dispatch room's trigger requests): a row due after the
 * backoff that any node hosting the actor takes, inside the caller's transaction.
 */
export interface RetryWakeUps {
  scheduleWithin(
    client: SqlExecutor,
    episode: EpisodeRow,
    delayMs: number,
    node: string,
    reason: WakeReason,
  ): Promise<void>;
  /**
   * The condition, over the episode aliased `e`, that a wake-up `node` (a SQL text expression)
   * wrote waits for it: how a wait whose reply was lost is found committed.
   */
  scheduledBy(e: string, node: string): string;
  /** Completes the episode's wait wake-ups still scheduled, inside the caller's transaction. */
  dropWaitsWithin(client: SqlExecutor, episodeId: string): Promise<void>;
}

export const RETRY_WAKE_UPS = Symbol('CYCLIUM_RETRY_WAKE_UPS');
