import type { ClaimHold } from '../claims/claim-hold.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import type { ExpectationOptions } from '../actors/expectation.decorator.js';
import { BudgetExceededError, NondeterministicResumeError } from './episode-errors.js';
import type { EpisodeContext, EpisodeRow, EpisodeTrigger, StepTools } from './episode-context.interface.js';
import type { Checkpoint } from './episode-store.js';

export interface StepRecord {
  stepNo: number;
  journalNo: number;
  name: string;
  result: unknown;
  durationMs: number;
}

export interface RunningEpisodeDeps {
  episode: EpisodeRow;
  trigger: EpisodeTrigger;
  fence: number | null;
  resumed: boolean;
  hold: ClaimHold;
  checkpoints: Map<number, Checkpoint>;
  firstJournalNo: number;
  budget: ExpectationOptions['budget'];
  /** Writes the step's journal row and checkpoint, fenced; false when the claim is no longer ours. */
  writeStep: (record: StepRecord) => Promise<boolean>;
}

/** One episode in flight on this node: the context its method receives, and the handle to stop it. */
export class RunningEpisode<P = unknown> implements EpisodeContext<P> {
  readonly episode: EpisodeRow;
  readonly trigger: EpisodeTrigger<P>;
  readonly fence: number | null;
  readonly resumed: boolean;
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly startedAt = performance.now();
  private stepNo = 0;
  private journalNo: number;

  constructor(private readonly deps: RunningEpisodeDeps) {
    this.episode = deps.episode;
    this.trigger = deps.trigger as EpisodeTrigger<P>;
    this.fence = deps.fence;
    this.resumed = deps.resumed;
    this.journalNo = deps.firstJournalNo;
    this.signal = AbortSignal.any([deps.hold.signal, this.controller.signal]);
  }

  /** Stops the episode before its next step (cancel, drain). The first reason wins. */
  stop(reason: Error): void {
    this.controller.abort(reason);
  }

  /** Throws when the episode was stopped or lost its claim (budget aside). */
  throwIfAborted(): void {
    if (this.signal.aborted) throw this.signal.reason;
    this.deps.hold.check();
  }

  /** Throws the reason this episode must stop before its next step, if there is one. */
  throwIfStopped(): void {
    this.throwIfAborted();
    const { maxSteps, maxWallMs } = this.deps.budget ?? {};
    if (maxWallMs !== undefined && performance.now() - this.startedAt >= maxWallMs) {
      this.stop(new BudgetExceededError(`budget exceeded: maxWallMs ${maxWallMs} reached before step ${this.stepNo + 1}`));
      throw this.signal.reason;
    }
    if (maxSteps !== undefined && this.stepNo >= maxSteps) {
      this.stop(new BudgetExceededError(`budget exceeded: maxSteps ${maxSteps} reached`));
      throw this.signal.reason;
    }
  }

  async step<T>(name: string, fn: (tools: StepTools) => Promise<T> | T): Promise<T> {
    this.throwIfStopped();
    const stepNo = ++this.stepNo;
    const recorded = this.deps.checkpoints.get(stepNo);
    if (recorded) {
      if (recorded.name !== name) {
        throw new NondeterministicResumeError(
          `step ${stepNo} was recorded as "${recorded.name}" but the code now asks for "${name}"`,
        );
      }
      return recorded.state as T;
    }
    const started = performance.now();
    const result = await fn({ stepNo, idempotencyKey: `${this.episode.id}:${stepNo}`, signal: this.signal });
    const written = await this.deps.writeStep({
      stepNo,
      journalNo: this.journalNo++,
      name,
      result,
      durationMs: Math.round(performance.now() - started),
    });
    if (!written) {
      const lost = new ClaimLostError(this.deps.hold.key, this.fence, 'not_owner');
      this.stop(lost);
      throw lost;
    }
    return result;
  }
}
