import { Inject, Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { FencedStatement } from '../leases/claims-in-statement.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeJournal } from './episode-journal.js';
import { EpisodeSignatures } from './episode-signatures.js';
import { firstLine } from './episode-log-lines.js';
import type { Ownership } from './episode-statements.js';
import { toEpisode } from './episode-store.js';
import { retryDelayMs, type RetryOptions } from './retry-policy.js';
import { RETRY_WAKE_UPS, type RetryWakeUps } from './retry-wake-ups.interface.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/** Failures the library decides, and cancels: a retry would meet them again. */
const NEVER_RETRIED = new Set([
  'canceled',
  'unknown_actor',
  'nondeterministic_resume',
  'patch_deprecated',
  'budget_exceeded',
  'tampered',
  'step_result',
]);

/**
 * The running episode leaves `running` for `waiting` while this node still owns it at its fence
 * (WorkClaims.fencedStatement) and no sweep took it (with claims off the row is the only proof),
 * with $5 failed attempts more on its count (1 for a retry, 0 for a sleep); no owner, no slot.
 */
const WAIT: FencedStatement = {
  name: 'episodes_wait',
  body: `
  UPDATE cyclium_episodes
    SET status = 'waiting', owner_node = NULL, phase = NULL, retries = retries + $5::int,
        updated_at = now()
    FROM owner
   WHERE cyclium_episodes.id = $4 AND status = ${KEYED_RUNNING} AND owner_node = $2
     AND phase IS DISTINCT FROM 'recovering'
  RETURNING cyclium_episodes.*`,
};

/**
 * The operator's retry of a failed episode. A cancel asked of its failed run is cleared with the
 * rest of that run's outcome: the operator asks for a run now, which would otherwise stop at once.
 * The attempts it resets are signed ($2: EpisodeSignatures, over the row as the retry read it).
 */
const REOPEN = `
  UPDATE cyclium_episodes
     SET status = 'waiting', error_class = NULL, error_detail = NULL, finished_at = NULL,
         retries = 0, attempts = 0,
         owner_node = NULL, phase = NULL, cancel_requested_at = NULL, updated_at = now(),
         signature = $2
   WHERE id = $1 AND status = 'failed' AND archived_at IS NULL
  RETURNING *`;

/**
 * An episode waiting out a retry's backoff or an `ep.sleep`. Retries (the expectation's `retry`): a
 * failed attempt is journaled (`retry`, with its error), the episode waits `waiting` with a wake-up
 * row due after the backoff and its claim completed, all in one transaction fenced on the claim;
 * any node hosting the actor takes the wake-up when due and resumes the episode from its journal,
 * so completed steps do not run again.
 */
@Injectable()
export class EpisodeWaits {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly journal: EpisodeJournal,
    private readonly identity: NodeIdentity,
    private readonly signatures: EpisodeSignatures,
    @Inject(RETRY_WAKE_UPS) private readonly wakeUps: RetryWakeUps,
  ) {}

  /**
   * The backoff before the next attempt, or null when this failure ends the episode. A `retryable`
   * hook that throws says no.
   */
  nextDelay(
    episode: EpisodeRow,
    options: RetryOptions | undefined,
    errorClass: string,
    cause: unknown,
  ): number | null {
    const policy = options?.retry;
    if (!policy || NEVER_RETRIED.has(errorClass) || (episode.retries ?? 0) + 1 >= policy.attempts)
      return null;
    if (options.retryable) {
      try {
        if (!options.retryable(cause)) return null;
      } catch {
        return null;
      }
    }
    return retryDelayMs(policy, episode.retries ?? 0);
  }

  /**
   * Writes a retry's wait (see the class); false when the claim is no longer this node's, and
   * nothing was written.
   */
  wait(
    episode: EpisodeRow,
    ownership: Ownership,
    errorClass: string,
    detail: string,
    delayMs: number,
  ): Promise<boolean> {
    return this.waitOut(episode, ownership, delayMs, (waiting) => ({
      attempt: waiting.retries,
      errorClass,
      error: firstLine(detail),
      delayMs,
    }));
  }

  /**
   * Writes the wait of `ep.sleep`, whose wake-up time its step already journaled: the same
   * transaction as a retry's, counting no attempt; false when the claim is no longer this node's.
   */
  sleep(episode: EpisodeRow, ownership: Ownership, delayMs: number): Promise<boolean> {
    return this.waitOut(episode, ownership, delayMs, null);
  }

  /**
   * A `failed` episode (not archived: its checkpoints are there) back to `waiting`, due now: the
   * operator's retry, which resumes it from its journal on any node hosting the actor. Its error
   * goes to a `retry` marker (`manual`), and its counts of retries and crash recoveries start
   * again, so its policies apply afresh. Null when it is no longer failed (or was archived). The
   * caller checked the row (`accepts`): its reset count is signed over the row as read. The
   * operator's `reason`, when given, goes into the marker too: the journal is where the episode's
   * page shows why it ran again.
   */
  reopen(episode: EpisodeRow, reason?: string): Promise<EpisodeRow | null> {
    const node = this.identity.name();
    const signature = this.signatures.sign({ ...episode, attempts: 0 });
    return this.database.transaction(async (client) => {
      const { rows } = await client.query(REOPEN, [episode.id, signature]);
      if (!rows[0]) return null;
      const waiting = toEpisode(rows[0]);
      await this.journal.mark(
        [episode.id],
        'retry',
        {
          manual: true,
          node,
          errorClass: episode.errorClass,
          error: firstLine(episode.errorDetail ?? ''),
          ...(reason === undefined ? {} : { reason }),
        },
        client,
      );
      await this.wakeUps.scheduleWithin(client, waiting, 0, node, 'resume');
      return waiting;
    });
  }

  /**
   * After a wait (`wait`, or `sleep` when `retry` is false) that may have committed without its
   * reply reaching us: true when it did — the episode waits, its count of retries moved as that
   * wait moves it, with a wake-up this node wrote — so it is not written again.
   */
  async waited(episode: EpisodeRow, retry: boolean): Promise<boolean> {
    const { rows } = await this.database.sql.query<{ waited: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM cyclium_episodes e
                       WHERE e.id = $1 AND e.status = 'waiting' AND e.retries = $2
                         AND ${this.wakeUps.scheduledBy('e', '$3::text')}) AS waited`,
      [episode.id, (episode.retries ?? 0) + (retry ? 1 : 0), this.identity.name()],
    );
    return rows[0]?.waited === true;
  }

  private waitOut(
    episode: EpisodeRow,
    ownership: Ownership,
    delayMs: number,
    retry: ((waiting: EpisodeRow) => Record<string, unknown>) | null,
  ): Promise<boolean> {
    return this.database.transaction(async (client) => {
      const { rows } = await this.claims.fencedStatement(client, ownership, WAIT, [
        episode.id,
        retry ? 1 : 0,
      ]);
      if (!rows[0]) return false;
      const waiting = toEpisode(rows[0]);
      if (retry) await this.journal.mark([episode.id], 'retry', retry(waiting), client);
      await this.wakeUps.scheduleWithin(
        client,
        waiting,
        delayMs,
        this.identity.name(),
        retry ? 'retry' : 'sleep',
      );
      await this.claims.completeWithin(client, ownership.key, ownership.owner, ownership.fence);
      return true;
    });
  }
}
