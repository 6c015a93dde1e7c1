import { Injectable, Logger } from '@nestjs/common';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import { errorMessage } from '../sql/database-errors.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Outputs } from '../outputs/outputs.service.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import type { OutputProposal } from '../outputs/output-proposal.interface.js';
import type { Convergence, EpisodeRow } from './episode-context.interface.js';
import { EpisodeHandedBack, PatchDeprecatedError } from './patch-errors.js';
import {
  BudgetExceededError,
  EpisodeCanceledError,
  EpisodeSleeping,
  EpisodeWriteUnavailableError,
  NondeterministicResumeError,
} from './episode-errors.js';
import { lifecycleEvent, type LifecycleEventType } from './episode-events.js';
import type { OutgoingEvent } from '../bus/event-outbox.service.js';
import { episodeLabel, failureLines, firstLine } from './episode-log-lines.js';
import type { Ownership } from './episode-statements.js';
import { EpisodeStore } from './episode-store.js';
import { OwnedWrites, type WriteScope } from './owned-writes.js';
import { EpisodeWaits } from './episode-waits.service.js';
import { retryOptionsFor, type RetryOptions } from './retry-policy.js';
import type { RunningEpisode, ThrowingStep } from './running-episode.js';
import type { StepRecord } from './step-ports.interface.js';

/**
 * Failures the library decides rather than the host's code: their message says it all, so no stack
 * even at debug.
 */
const DECIDED = new Set([
  'unknown_actor',
  'nondeterministic_resume',
  'budget_exceeded',
  'tampered',
  'step_result',
]);

/**
 * How a run's end is recorded: its terminal write, fenced like every other write, with exactly
 * one terminal event (EpisodeRunner decides when a run has ended; this writes what it became).
 */
@Injectable()
export class EpisodeEndings {
  private readonly logger = new Logger('CycliumEpisodes');

  constructor(
    private readonly store: EpisodeStore,
    private readonly writes: OwnedWrites,
    private readonly identity: NodeIdentity,
    private readonly outputs: Outputs,
    private readonly telemetry: CycliumTelemetry,
    private readonly waits: EpisodeWaits,
  ) {}

  /**
   * A run that wrote no step never read its cancel flag back, and its bus message can come before
   * the run exists here (a cancel right after the begin) or not at all (another channel): the flag
   * is read once at its end. The method has run by then; the episode still ends `canceled`, its
   * findings and outputs unwritten, as when a cancel is heard after the last step. A read that
   * fails leaves the end to the end write, which meets the same fault. A cancel event read for a
   * running episode asks the same question, so a forged event stops nothing.
   */
  async honourCancel(context: RunningEpisode): Promise<void> {
    if (context.signal.aborted) return;
    try {
      if (await this.store.cancelRequested(context.episode.id))
        context.stop(new EpisodeCanceledError(context.episode.id));
    } catch (error) {
      this.logger.warn(
        `could not read whether episode ${context.episode.id} was canceled: ${errorMessage(error)}`,
      );
    }
  }

  /**
   * Post-converge (rule 4): ownership at the fence, findings, outputs, status, checkpoints, claim
   * and the terminal event — one statement, with the journal row of the run's last step when it
   * is given (its checkpoint would be cleared in the same statement, so none is written). False
   * when the end with that step was refused (a cancel pending, or the claim gone): nothing was
   * written. Without a step, a refused end throws ClaimLostError.
   */
  async converge(
    episode: EpisodeRow,
    ownership: Ownership,
    scope: WriteScope,
    result: Convergence,
    lastStep?: StepRecord,
  ): Promise<boolean> {
    const status: EpisodeStatus =
      result.status === 'partially_failed' ? 'partially_failed' : 'done';
    // The outputs' leases run from the database's now(), which is later than this.
    const sentAt = performance.now();
    const won = await this.writes.end(scope, episode, ownership, {
      terminal: {
        status,
        summary: result.summary ?? null,
        classification: result.classification,
        result: result.result,
      },
      findings: result.findings,
      outputs: result.outputs,
      event: this.lifecycle('episode.completed', episode, status),
      lastStep,
    });
    if (won === null && lastStep) return false;
    if (won === null) throw new ClaimLostError(ownership.key, ownership.fence, 'not_owner');
    this.telemetry.emit('episode.completed', { ...describeEpisode(episode), status });
    this.logger.debug(`${episodeLabel(episode)} ended ${status}`);
    const proposals = result.outputs ?? [];
    if (won.length < proposals.length) won.push(...(await this.reclaimed(episode, proposals, won)));
    if (won.length > 0) await this.outputs.deliver(won, sentAt);
    return true;
  }

  /**
   * Outputs.reclaim; a failure leaves the stray row for the output rescue to fail, as it would
   * without this.
   */
  private async reclaimed(
    episode: EpisodeRow,
    proposals: readonly OutputProposal[],
    won: readonly CycliumOutput[],
  ): Promise<CycliumOutput[]> {
    try {
      return await this.outputs.reclaim(episode, proposals, won);
    } catch (error) {
      this.logger.warn(
        `episode ${episode.id}: could not check the output rows already under its keys: ` +
          `${errorMessage(error)}`,
      );
      return [];
    }
  }

  /**
   * Records how a run that did not converge ended, fenced like every other write, with its terminal
   * event.
   */
  async settle(
    episode: EpisodeRow,
    ownership: Ownership,
    scope: WriteScope,
    cause: unknown,
    declared?: RetryOptions,
    step?: ThrowingStep,
  ): Promise<void> {
    // A lost claim, or a fault of the library's own writes (rule 12): the episode is someone
    // else's, or recovery's.
    if (cause instanceof ClaimLostError || cause instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, cause);
      return;
    }
    const [status, errorClass, thrown] = classify(cause);
    // Where it threw leads the detail: the journal holds only the steps that completed.
    const detail = step ? `in ${step.kind} ${step.stepNo} "${step.name}": ${thrown}` : thrown;
    const { options: retry, problem } = retryOptionsFor(episode, declared);
    if (problem && status === 'failed')
      this.logger.warn(
        `${episodeLabel(episode)}: ${problem}; the expectation's retry policy applies`,
      );
    const delayMs =
      status === 'failed' ? this.waits.nextDelay(episode, retry, errorClass, cause) : null;
    if (delayMs !== null) {
      const allowed = retry?.retry?.attempts ?? 0;
      await this.retryLater(episode, ownership, {
        scope,
        errorClass,
        detail,
        delayMs,
        attempts: allowed,
      });
      return;
    }
    const attempts =
      retry?.retry && status === 'failed'
        ? `attempt ${(episode.retries ?? 0) + 1} of ${retry.retry.attempts}: `
        : '';
    const event = status === 'canceled' ? 'episode.canceled' : 'episode.failed';
    const recorded = await this.writes
      .end(scope, episode, ownership, {
        terminal: { status, errorClass, detail: attempts + detail },
        event: this.lifecycle(event, episode, status, { errorClass }),
      })
      .catch((error: unknown) => {
        if (error instanceof EpisodeWriteUnavailableError) return error;
        throw error;
      });
    if (recorded instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, recorded);
      return;
    }
    if (recorded === null) {
      this.abandon(
        episode,
        new ClaimLostError(ownership.key, ownership.fence, 'not_owner'),
        'before its outcome was recorded',
      );
      return;
    }
    if (status === 'canceled') {
      this.logger.debug(`${episodeLabel(episode)} ended canceled`);
    } else {
      const lines = failureLines(episode, errorClass, cause, DECIDED.has(errorClass));
      this.logger.warn(lines.warn);
      if (lines.debug) this.logger.debug(lines.debug);
    }
    this.telemetry.emit(event, { ...describeEpisode(episode), errorClass });
  }

  /**
   * `ep.sleep` stopped the run before its wake-up time: the episode waits until then
   * (EpisodeWaits.sleep).
   */
  async sleep(
    episode: EpisodeRow,
    ownership: Ownership,
    scope: WriteScope,
    sleeping: EpisodeSleeping,
  ): Promise<void> {
    const write = () => this.waits.sleep(episode, ownership, sleeping.delayMs);
    const waited = await this.waitWritten(scope, episode, 'sleep', write);
    if (waited instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, waited);
      return;
    }
    if (!waited) {
      this.abandon(
        episode,
        new ClaimLostError(ownership.key, ownership.fence, 'not_owner'),
        'before its sleep was recorded',
      );
      return;
    }
    if (sleeping instanceof EpisodeHandedBack)
      this.logger.warn(
        `${episodeLabel(episode)} handed back: it needs ${sleeping.needs}, which this node's ` +
          `code lacks; a node takes it again in ${sleeping.delayMs} ms`,
      );
    else
      this.logger.debug(
        `${episodeLabel(episode)} sleeps "${sleeping.sleepName}" for ${sleeping.delayMs} ms`,
      );
    this.telemetry.emit('episode.sleeping', {
      ...describeEpisode(episode),
      name: sleeping.sleepName,
      delayMs: sleeping.delayMs,
    });
  }

  /**
   * A failed attempt with attempts left: the episode waits out its backoff (EpisodeWaits), or is
   * abandoned when its claim moved on.
   */
  private async retryLater(
    episode: EpisodeRow,
    ownership: Ownership,
    retry: RetryLater,
  ): Promise<void> {
    const { scope, errorClass, detail, delayMs, attempts } = retry;
    const attempt = (episode.retries ?? 0) + 1;
    const write = () => this.waits.wait(episode, ownership, errorClass, detail, delayMs);
    const waited = await this.waitWritten(scope, episode, 'retry', write);
    if (waited instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, waited);
      return;
    }
    if (!waited) {
      this.abandon(
        episode,
        new ClaimLostError(ownership.key, ownership.fence, 'not_owner'),
        'before its retry was recorded',
      );
      return;
    }
    this.logger.warn(
      `${episodeLabel(episode)} attempt ${attempt} of ${attempts} failed as ${errorClass} ` +
        `(${firstLine(detail)}); retrying in ${delayMs} ms`,
    );
    this.telemetry.emit('episode.retrying', {
      ...describeEpisode(episode),
      errorClass,
      attempt,
      delayMs,
    });
  }

  /**
   * A wait write (EpisodeWaits), retried through a database fault of the library's own while this
   * node owns the episode (OwnedWrites.wait, rule 12): true once written, false when the episode is
   * no longer this node's, or the fault that outlasted its ownership (left to recovery).
   */
  private async waitWritten(
    scope: WriteScope,
    episode: EpisodeRow,
    kind: 'retry' | 'sleep',
    write: () => Promise<boolean>,
  ): Promise<boolean | EpisodeWriteUnavailableError> {
    const committed = () => this.waits.waited(episode, kind === 'retry');
    try {
      return await this.writes.wait(
        scope,
        kind === 'retry' ? 'retry wait' : 'sleep',
        write,
        committed,
      );
    } catch (error) {
      if (error instanceof EpisodeWriteUnavailableError) return error;
      throw error;
    }
  }

  /**
   * A run that lost its claim, or whose own writes met a database fault, ends here writing nothing.
   * A claim the database no longer shows as ours says nothing of who has it: the episode row does
   * (read after the fact, so its answer is only what is known now), and the line says that rather
   * than blaming another node for a lease that simply ran out.
   */
  private abandon(
    episode: EpisodeRow,
    cause: ClaimLostError | EpisodeWriteUnavailableError,
    when = '',
  ): void {
    const reason = when ? `${cause.message} (${when})` : cause.message;
    this.telemetry.emit('episode.aborted', { ...describeEpisode(episode), reason });
    const line = `${episodeLabel(episode)} aborted, writing nothing more: ${reason}`;
    if (!(cause instanceof ClaimLostError) || cause.reason !== 'not_owner') {
      this.logger.warn(line);
      return;
    }
    this.store
      .get(episode.id)
      .then((row) => this.logger.warn(`${line}; ${this.lossFound(row)}`))
      .catch(() => this.logger.warn(line));
  }

  private lossFound(row: EpisodeRow | null): string {
    const me = this.identity.name();
    if (!row) return 'the episode row is gone';
    if (['done', 'partially_failed', 'failed', 'canceled'].includes(row.status)) {
      const where = row.ownerNode && row.ownerNode !== me ? ` on node ${row.ownerNode}` : '';
      return (
        `the episode has since ended ` +
        `${row.status}${row.errorClass ? ` as ${row.errorClass}` : ''}${where}`
      );
    }
    if (row.ownerNode !== me)
      return `node ${row.ownerNode ?? 'unknown'} has taken it over (${row.status})`;
    return (
      'its lease ran out before a renewal reached the database, and no node has taken it ' +
      'over yet: recovery restarts it once it is stale'
    );
  }

  /**
   * An end's event, written only when something reads it (LifecycleReads), except a workflow
   * step's: its engine hears it without declaring it.
   */
  private lifecycle(
    type: LifecycleEventType,
    episode: EpisodeRow,
    status: EpisodeStatus,
    extra = {},
  ): OutgoingEvent {
    return {
      ...lifecycleEvent(type, episode, status, this.identity.name(), extra),
      ifRead: (episode.workflowInstanceId ?? null) === null,
    };
  }
}

/** What a failed attempt with attempts left waits with. */
interface RetryLater {
  scope: WriteScope;
  errorClass: string;
  detail: string;
  delayMs: number;
  attempts: number;
}

/** An episode as telemetry names it. */
export function describeEpisode(episode: EpisodeRow) {
  return { episodeId: episode.id, actorId: episode.actorId, expectationId: episode.expectationId };
}

function classify(cause: unknown): [Extract<EpisodeStatus, 'failed' | 'canceled'>, string, string] {
  if (cause instanceof EpisodeCanceledError) return ['canceled', 'canceled', cause.message];
  if (cause instanceof BudgetExceededError) return ['failed', 'budget_exceeded', cause.message];
  if (cause instanceof NondeterministicResumeError)
    return ['failed', 'nondeterministic_resume', cause.message];
  if (cause instanceof PatchDeprecatedError) return ['failed', 'patch_deprecated', cause.message];
  if (cause instanceof Error) {
    const errorClass = (cause as Error & { errorClass?: string }).errorClass ?? 'crash';
    return ['failed', errorClass, `${cause.message}\n${cause.stack ?? ''}`.trim()];
  }
  return ['failed', 'crash', String(cause)];
}
