import type { SqlExecutor } from '../sql/sql-executor.js';
import type { EpisodeRow } from './episode-context.interface.js';

/**
 * Where a retry's wake-up is written (the dispatch room's trigger requests): a row due after the
 * backoff that any node hosting the actor takes, inside the caller's transaction.
 */
export interface RetryWakeUps {
  scheduleWithin(client: SqlExecutor, episode: EpisodeRow, delayMs: number, node: string): Promise<void>;
}

export const RETRY_WAKE_UPS = Symbol('CYCLIUM_RETRY_WAKE_UPS');
