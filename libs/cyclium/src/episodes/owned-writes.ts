import { Inject, Injectable, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClaimHold } from '../claims/claim-hold.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorCode, errorMessage, isTransientDatabaseError } from '../sql/database-errors.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeWriteUnavailableError } from './episode-errors.js';
import { EpisodeJournal } from './episode-journal.js';
import type { EndOutcome, Ownership } from './episode-statements.js';
import { EndWrites } from './end-writes.js';
import type { History, StepRecord, StepWriteOutcome } from './step-ports.interface.js';
import { StepWrites } from './step-writes.js';

const FIRST_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 1_000;

/**
 * One run's right to keep retrying a write that failed at `failedAt` (performance.now()): while its
 * claim holds (claims on), or for the staleness window from that failure (claims off).
 */
export interface WriteScope {
  readonly episodeId: string;
  owned(failedAt: number): boolean;
}

/**
 * The writes a running episode makes (its history read, its steps, its end), made to survive the
 * library's own faults (rule 12): a dropped connection, a pooler reload, a lock or statement
 * timeout, a deadlock. Each is sent again with backoff while this node still owns the episode at
 * its fence, every later attempt fenced exactly as the first, each episode of a batch with its
 * own fence. Before sending again it asks whether the lost attempt committed after all (the step's
 * journal row at its position, the claim finished by this owner at this fence), and answers that
 * attempt's outcome, so a write is never applied twice and a committed end is never taken for a
 * lost claim.
 */
@Injectable()
export class OwnedWrites {
  private readonly logger = new Logger('CycliumEpisodes');

  constructor(
    private readonly steps: StepWrites,
    private readonly ends: EndWrites,
    private readonly journal: EpisodeJournal,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  scope(episodeId: string, hold: ClaimHold): WriteScope {
    // With claims off nothing expires locally; past the staleness window recovery may take the
    // episode anyway.
    const window =
      hold.fence === null ? this.options.recovery.staleAfterMs : Number.POSITIVE_INFINITY;
    return { episodeId, owned: (failedAt) => !hold.lost && performance.now() < failedAt + window };
  }

  /** The checkpoints and next journal position of a resumed run. */
  history(scope: WriteScope): Promise<History> {
    const read = async (): Promise<History> => {
      const [checkpoints, nextJournalNo] = await Promise.all([
        this.journal.checkpoints(scope.episodeId),
        this.journal.nextPosition(scope.episodeId),
      ]);
      return { checkpoints, nextJournalNo };
    };
    return this.retry(scope, 'history read', read, read);
  }

  step(scope: WriteScope, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome> {
    const write = () => this.steps.write(scope.episodeId, ownership, record);
    return this.retry(scope, `step ${record.stepNo} ("${record.name}")`, write, async () => {
      return (await this.steps.confirm(scope.episodeId, ownership, record)) ?? write();
    });
  }

  /**
   * EndWrites.end; an end found committed answers no outputs to deliver (they are pending rows the
   * output rescue delivers).
   */
  end(
    scope: WriteScope,
    episode: EpisodeRow,
    ownership: Ownership,
    outcome: EndOutcome,
  ): Promise<CycliumOutput[] | null> {
    const write = () => this.ends.end(episode, ownership, outcome);
    const committed = async () =>
      (await this.ends.confirm(episode.id, ownership, outcome.terminal.status)) === 'ended';
    return this.retry(scope, `end (${outcome.terminal.status})`, write, async () => {
      const found = await this.ends.confirm(episode.id, ownership, outcome.terminal.status);
      if (found === 'ended') return [];
      if (found === 'lost') return null;
      // An attempt that timed out on this side may still have been running there, and committed
      // first.
      return (await write()) ?? ((await committed()) ? [] : null);
    });
  }

  /**
   * A wait (EpisodeWaits: a retry's backoff, a sleep) retried as the other writes are: false when
   * the episode is no longer this node's. Before sending again it asks `committed` whether the lost
   * attempt went through; the wait is fenced and written only from `running`, so a second attempt
   * after one that did commit writes nothing, and is asked the same.
   */
  wait(
    scope: WriteScope,
    what: string,
    write: () => Promise<boolean>,
    committed: () => Promise<boolean>,
  ) {
    return this.retry(
      scope,
      what,
      write,
      async () => (await committed()) || (await write()) || (await committed()),
    );
  }

  /**
   * A transaction step's attempts (TransactionSteps): sent again, whole, while this node owns the
   * episode, after a fault of the database's (a dropped connection, a serialization failure, a
   * deadlock) in the host's statements or the library's; `again` first asks whether the lost
   * attempt committed. A unique violation is the host's own here, never taken for a commit.
   */
  transaction<R>(
    scope: WriteScope,
    what: string,
    first: () => Promise<R>,
    again: () => Promise<R>,
  ): Promise<R> {
    return this.retry(scope, what, first, again, false);
  }

  private async retry<R>(
    scope: WriteScope,
    what: string,
    first: () => Promise<R>,
    again: () => Promise<R>,
    settlesOnConflict = true,
  ): Promise<R> {
    let failedAt = 0;
    for (let attempt = 0; ; attempt++) {
      try {
        return await (attempt === 0 ? first() : again());
      } catch (error) {
        // A later attempt that meets the row of an earlier one: that one committed meanwhile, and
        // the next confirm sees it.
        const settledMeanwhile = settlesOnConflict && attempt > 0 && errorCode(error) === '23505';
        if (!isTransientDatabaseError(error) && !settledMeanwhile) throw error;
        if (attempt === 0) failedAt = performance.now();
        if (!scope.owned(failedAt))
          throw new EpisodeWriteUnavailableError(scope.episodeId, what, error);
        if (attempt === 0)
          this.logger.warn(
            `episode ${scope.episodeId}: the ${what} met a database fault, retrying while this ` +
              `node owns it: ${errorMessage(error)}`,
          );
        await sleep(Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** attempt));
      }
    }
  }
}
