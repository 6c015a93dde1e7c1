import { TamperedRowError } from '../integrity/tampered-row.error.js';
import type { ClaimHold } from '../claims/claim-hold.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import {
  BudgetExceededError,
  EpisodeCanceledError,
  EpisodeSleeping,
  EpisodeWaiting,
  EpisodeWriteUnavailableError,
  NondeterministicResumeError,
} from './episode-errors.js';
import type {
  EpisodeBudget,
  EpisodeContext,
  EpisodeRow,
  EpisodeTrigger,
  StepTools,
} from './episode-context.interface.js';
import type { Checkpoint } from './episode-journal.js';
import { encodeStepResult } from './step-result.js';
import type { EntityManager } from 'typeorm';
import type {
  ChildHandle,
  ChildrenWaitResult,
  EpisodeOutcome,
  EventWaitOptions,
  EventWaitResult,
  SignalWaitResult,
  StartChildOptions,
  WaitOptions,
} from './wait.types.js';
import { ChildEpisodesFailedError } from './wait-errors.js';
import {
  checkName,
  checkSleep,
  childSpec,
  childrenWait,
  eventWait,
  signalWait,
} from './wait-arguments.js';
import type {
  ChildSpec,
  History,
  StepRecord,
  StepWriteOutcome,
  TransactionStep,
  TransactionStepOutcome,
  WaitSpec,
  WaitStep,
  WaitStepOutcome,
} from './step-ports.interface.js';
import { PATCH_PREFIX, missingPatch, pastMarkers, patchPoint } from './patch-points.js';
import {
  NOOP_RUN_TRACE,
  type RunTrace,
  type StepKind,
  type StepTrace,
} from './run-tracer.interface.js';

const INT4_MAX = 2_147_483_647;

export interface RunningEpisodeDeps {
  episode: EpisodeRow;
  trigger: EpisodeTrigger;
  fence: number | null;
  resumed: boolean;
  hold: ClaimHold;
  /** Loaded while the method starts; a fresh run has none. */
  history: Promise<History> | History;
  budget: EpisodeBudget | undefined;
  writeStep: (record: StepRecord) => Promise<StepWriteOutcome>;
  /** Runs a transaction step (TransactionSteps.run for this run). */
  transactionStep: (step: TransactionStep) => Promise<TransactionStepOutcome>;
  /** Runs a wait (WaitSteps.run for this run). */
  waitStep: (step: WaitStep) => Promise<WaitStepOutcome>;
  /** Triggers a child inside a transaction step's transaction (ChildStarter). */
  startChild: (manager: EntityManager, child: ChildSpec) => Promise<ChildHandle>;
  /** Told each step's function time once its write came back written (telemetry). */
  stepWritten?: (durationMs: number) => void;
  /** The run's trace (EpisodeTraces); absent: none. */
  trace?: RunTrace;
  /** The wall clock a sleep reads (CYCLIUM_CLOCK); absent: Date.now. */
  now?: () => number;
}

const FRESH: History = { checkpoints: new Map(), nextJournalNo: 1 };

/** Where a run failed: a step (or transaction step) and its number in the journal. */
export interface ThrowingStep {
  kind: StepKind;
  name: string;
  stepNo: number;
}

/**
 * One episode in flight on this node: the context its method receives, and the handle to stop it.
 * It exists from the first moment of the run, so a drain that looks at this node sees it.
 */
export class RunningEpisode<P = unknown> implements EpisodeContext<P> {
  readonly episode: EpisodeRow;
  readonly trigger: EpisodeTrigger<P>;
  readonly fence: number | null;
  readonly resumed: boolean;
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly startedAt = performance.now();
  private stepNo = 0;
  private journalNo: number | undefined;
  private history: History | undefined;
  private wrote = false;
  /** A step the method has its result of, not written yet (see step). */
  private unwritten: { record: StepRecord; durationMs: number } | undefined;
  /** The function time of the step takeUnwritten handed to the end. */
  private carriedMs: number | undefined;
  /** The write flushIfStill started, until the run's next call (or its end) awaits it. */
  private flushing: Promise<void> | undefined;
  /** The first patch marker this run replayed past without a call for it (see pastMarkers). */
  private skipped: Checkpoint | undefined;
  /** Patch markers taken fresh, journaled before the next step (see `patched`). */
  private markers: Array<{ stepNo: number; name: string }> = [];
  /**
   * Whose function is running: a step inside a transaction step would journal outside its
   * transaction, and a transaction step inside any step would nest one step's journal in another's.
   */
  private inside: 'step' | 'transaction' | null = null;
  /** The last error a step threw, and the step: an operator reads where an episode failed. */
  private thrown: { error: unknown; step: ThrowingStep } | undefined;
  private readonly trace: RunTrace;

  constructor(private readonly deps: RunningEpisodeDeps) {
    this.trace = deps.trace ?? NOOP_RUN_TRACE;
    this.episode = deps.episode;
    this.trigger = deps.trigger as EpisodeTrigger<P>;
    this.fence = deps.fence;
    this.resumed = deps.resumed;
    // The claim's loss stops the episode as its own stop does (AbortSignal.any costs more than the
    // rest of the setup).
    this.signal = this.controller.signal;
    const held = deps.hold.signal;
    if (held.aborted) this.controller.abort(held.reason);
    else held.addEventListener('abort', () => this.controller.abort(held.reason), { once: true });
    if (deps.episode.cancelRequestedAt) this.stop(new EpisodeCanceledError(deps.episode.id));
  }

  /** The drain gives this claim up itself: stop renewing it, quietly. */
  stopRenewing(): void {
    this.deps.hold.stopRenewing();
  }

  /**
   * Before the method: a resumed run reads its journal, so `patched` can answer at once, before any
   * step.
   */
  async prepare(): Promise<void> {
    this.history ??= this.deps.resumed ? await this.library(this.deps.history) : FRESH;
  }

  get claimKey(): string {
    return this.deps.hold.key;
  }

  /** True once a step write of this run came back: each one read the episode's cancel flag. */
  get wroteStep(): boolean {
    return this.wrote;
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
      this.stop(
        new BudgetExceededError(
          `budget exceeded: maxWallMs ${maxWallMs} reached before step ${this.stepNo + 1}`,
        ),
      );
      throw this.signal.reason;
    }
    if (maxSteps !== undefined && this.stepNo >= maxSteps) {
      this.stop(new BudgetExceededError(`budget exceeded: maxSteps ${maxSteps} reached`));
      throw this.signal.reason;
    }
  }

  /**
   * A library write that gave up stops the episode, so a method that catches it cannot go on and
   * have it recorded as its own failure.
   */
  private async library<T>(write: Promise<T> | T): Promise<T> {
    try {
      return await write;
    } catch (error) {
      // A host's catch around a step must not swallow these: the run stops either way.
      if (error instanceof EpisodeWriteUnavailableError || error instanceof TamperedRowError)
        this.stop(error);
      throw error;
    }
  }

  async step<T>(name: string, fn: (tools: StepTools) => Promise<T> | T): Promise<T> {
    const next = await this.next('step', name);
    if (next.replayed) return next.result as T;
    const { stepNo, history } = next;
    return this.traced('step', name, stepNo, async (span) => {
      const started = performance.now();
      this.inside = 'step';
      let result: T;
      try {
        result = await span.within(() => fn(this.tools(stepNo)));
      } finally {
        this.inside = null;
      }
      const durationMs = performance.now() - started;
      const resultJson = encodeStepResult(name, result);
      this.journalNo ??= history.nextJournalNo;
      // duration_ms is a 32-bit column: a step that ran longer than 24.8 days is journaled as
      // that long.
      const journaledMs = Math.min(Math.round(durationMs), INT4_MAX);
      const record = {
        stepNo,
        journalNo: this.journalNo++,
        name,
        resultJson,
        durationMs: journaledMs,
      };
      // Written before anything else of the run happens (the next call on this context, the
      // method's failure, anything it awaits outside), or with the end when the method just
      // returns: the same fence proves both, and only the method's own code runs between.
      const unwritten = { record, durationMs };
      this.unwritten = unwritten;
      setImmediate(() => this.flushIfStill(unwritten));
      return result;
    });
  }

  /** Whether a step waits to be written (see step). */
  get hasUnwritten(): boolean {
    return this.unwritten !== undefined;
  }

  /**
   * A method that returns right after its last step does so within the microtasks that follow it;
   * one still running by the next turn of the event loop awaits something outside (I/O, a timer),
   * and the step is written now, alone, as it always was.
   */
  private flushIfStill(unwritten: { record: StepRecord; durationMs: number }): void {
    if (this.unwritten !== unwritten) return;
    const flush = this.flushUnwritten();
    // Its failure reaches the run at its next call, or the end (see flushUnwritten).
    flush.catch(() => undefined);
    this.flushing = flush;
  }

  /** Once a write flushIfStill started is answered (its failure thrown). */
  async writesSettled(): Promise<void> {
    const flushing = this.flushing;
    this.flushing = undefined;
    if (flushing) await flushing;
  }

  /**
   * The step whose write waits for whatever the run does next (see step), taken: the end writes
   * it in its own statement and says so with `carried`.
   */
  takeUnwritten(): StepRecord | undefined {
    const step = this.unwritten;
    this.unwritten = undefined;
    this.carriedMs = step?.durationMs;
    return step?.record;
  }

  /** The end wrote the step takeUnwritten gave it. */
  carried(): void {
    if (this.carriedMs !== undefined) this.written('written', this.carriedMs);
    this.carriedMs = undefined;
  }

  /**
   * Writes the step that waits, if any, alone: before the run's next call, or its failure. A lost
   * claim throws (ClaimLostError), a cancel stops the run, as after any step write.
   */
  async flushUnwritten(record?: StepRecord): Promise<void> {
    // A write under way since the method awaited something: the run goes on once it is answered.
    await this.writesSettled();
    const step = record ? { record, durationMs: this.carriedMs ?? 0 } : this.unwritten;
    this.unwritten = undefined;
    this.carriedMs = undefined;
    if (step) this.written(await this.library(this.deps.writeStep(step.record)), step.durationMs);
  }

  /**
   * Runs `body` inside the span of step `stepNo`, which ends with the error it threw, if any (a
   * wait or sleep that gives the run up is no error).
   */
  private async traced<T>(
    kind: StepKind,
    name: string,
    stepNo: number,
    body: (span: StepTrace) => Promise<T>,
  ): Promise<T> {
    const span = this.trace.step(kind, name, stepNo);
    try {
      const result = await body(span);
      span.end();
      return result;
    } catch (error) {
      const gaveUp = error instanceof EpisodeSleeping || error instanceof EpisodeWaiting;
      span.end(gaveUp ? undefined : error);
      if (!gaveUp) this.thrown = { error, step: { kind, name, stepNo } };
      throw error;
    }
  }

  /**
   * The step that threw `cause`, when the run ends with the very error a step threw (not one the
   * method caught and replaced, nor one thrown between steps).
   */
  stepThatThrew(cause: unknown): ThrowingStep | undefined {
    return this.thrown && this.thrown.error === cause ? this.thrown.step : undefined;
  }

  async transaction<T>(
    name: string,
    fn: (manager: EntityManager, tools: StepTools) => Promise<T>,
  ): Promise<T> {
    if (this.inside)
      throw new TypeError(
        `ep.transaction("${name}"): a transaction step cannot run inside another step; call it ` +
          `from the expectation method`,
      );
    const next = await this.next('transaction', name);
    if (next.replayed) return next.result as T;
    const { stepNo, history } = next;
    this.journalNo ??= history.nextJournalNo;
    const tools = this.tools(stepNo);
    return this.traced('transaction', name, stepNo, async (span) => {
      this.inside = 'transaction';
      let done: TransactionStepOutcome;
      try {
        done = await this.library(
          this.deps.transactionStep({
            stepNo,
            journalNo: this.journalNo as number,
            name,
            run: (manager) => span.within(() => fn(manager, tools)),
            check: () => this.deps.hold.check(),
          }),
        );
      } finally {
        this.inside = null;
      }
      this.journalNo = (this.journalNo as number) + 1;
      this.written(done.outcome, done.durationMs);
      return done.result as T;
    });
  }

  /**
   * The next step's number, or its recorded result when a resumed run replays it (after checking
   * the signal and that the journal recorded the same name there).
   */
  private async next(
    kind: StepKind,
    name: string,
  ): Promise<
    { replayed: true; result: unknown } | { replayed: false; stepNo: number; history: History }
  > {
    if (this.inside === 'transaction')
      throw new TypeError(
        `step "${name}": a step cannot run inside ep.transaction; make it a step of its own`,
      );
    await this.flushUnwritten();
    this.throwIfStopped();
    this.history ??= this.deps.resumed ? await this.library(this.deps.history) : FRESH;
    this.throwIfStopped();
    const stepNo = ++this.stepNo;
    const recorded = this.history.checkpoints.get(stepNo);
    if (!recorded) {
      await this.writeMarkers(this.history);
      return { replayed: false, stepNo, history: this.history };
    }
    if (recorded.name !== name && !name.startsWith(PATCH_PREFIX)) {
      const past = pastMarkers(this.history.checkpoints, stepNo, name);
      if (past !== null) {
        this.skipped ??= recorded;
        this.stepNo = past;
        this.trace.replayed(kind, name, past);
        return { replayed: true, result: this.history.checkpoints.get(past)?.state };
      }
    }
    if (recorded.name !== name) {
      // Past a marker this code does not call, a step that differs says the code lacks the patch.
      const handBack = missingPatch(this.skipped ?? recorded, name);
      if (handBack) {
        this.stop(handBack);
        throw handBack;
      }
      throw new NondeterministicResumeError(
        `step ${stepNo} was recorded as "${recorded.name}" but the code now asks for "${name}"`,
      );
    }
    this.trace.replayed(kind, name, stepNo);
    return { replayed: true, result: recorded.state };
  }

  patched(id: string): boolean {
    return this.patch('ep.patched', id, false);
  }

  deprecatePatch(id: string): void {
    this.patch('ep.deprecatePatch', id, true);
  }

  private patch(call: string, id: string, deprecated: boolean): boolean {
    checkName(call, 'id', id);
    if (this.inside)
      throw new TypeError(`${call}("${id}"): call it from the method, not inside a step`);
    if (this.history === undefined)
      throw new Error(`${call}("${id}"): the run's journal is not read yet (prepare)`);
    this.throwIfStopped();
    const stepNo = this.stepNo + 1;
    let point: ReturnType<typeof patchPoint>;
    try {
      point = patchPoint(id, stepNo, this.history.checkpoints.get(stepNo), deprecated);
    } catch (error) {
      this.stop(error as Error);
      throw error;
    }
    if (point === 'old') return false;
    this.stepNo = stepNo;
    // Journaled with the next step, ahead of it: only a step after the marker could make a later
    // replay take this point for one passed before the patch.
    if (point === 'fresh') this.markers.push({ stepNo, name: `${PATCH_PREFIX}${id}` });
    return true;
  }

  /** The patch markers taken since the last step, as steps of their own, in order. */
  private async writeMarkers(history: History): Promise<void> {
    for (const { stepNo, name } of this.markers.splice(0)) {
      this.journalNo ??= history.nextJournalNo;
      const record = {
        stepNo,
        journalNo: this.journalNo++,
        name,
        resultJson: encodeStepResult(name, true),
        durationMs: 0,
      };
      this.written(await this.library(this.deps.writeStep(record)), 0);
    }
  }

  private tools(stepNo: number): StepTools {
    return { stepNo, idempotencyKey: `${this.episode.id}:${stepNo}`, signal: this.signal };
  }

  /** After a step's write: a lost claim stops the run now, a cancel before the next step. */
  private written(outcome: StepWriteOutcome, durationMs: number): void {
    this.wrote = true;
    if (outcome === 'not_owner') {
      const lost = new ClaimLostError(this.deps.hold.key, this.fence, 'not_owner');
      this.stop(lost);
      throw lost;
    }
    this.deps.stepWritten?.(durationMs);
    // The step is recorded; the cancel takes effect before the next one.
    if (outcome === 'cancel_requested') this.stop(new EpisodeCanceledError(this.episode.id));
  }

  async sleep(name: string, ms: number): Promise<void> {
    checkSleep(name, ms);
    // The wake-up time is the step's recorded result: a replay (after a wake-up, or a crash
    // before the wait was written) reads it back instead of sleeping from the start again.
    const now = this.deps.now ?? Date.now;
    const { wakeAt } = await this.step(`sleep:${name}`, () => ({ wakeAt: now() + ms }));
    // The wake-up time must be journaled before the run stops to sleep.
    await this.flushUnwritten();
    const left = wakeAt - now();
    if (left <= 0) return;
    const sleeping = new EpisodeSleeping(name, left);
    this.stop(sleeping);
    throw sleeping;
  }

  async waitForSignal<T = unknown>(
    name: string,
    options: WaitOptions = {},
  ): Promise<SignalWaitResult<T>> {
    const wait = signalWait(name, options);
    return this.waitStep(`signal:${name}`, wait) as Promise<SignalWaitResult<T>>;
  }

  async waitForEvent<T = unknown>(
    type: string,
    options: EventWaitOptions = {},
  ): Promise<EventWaitResult<T>> {
    const wait = eventWait(type, options);
    return this.waitStep(`event:${type}`, wait) as Promise<EventWaitResult<T>>;
  }

  async startChild<C = unknown>(
    actorId: string,
    expectationId: string,
    payload: C,
    options: StartChildOptions,
  ): Promise<ChildHandle> {
    const child = childSpec(actorId, expectationId, payload, options);
    return this.transaction(`child:${child.key}`, (manager) =>
      this.deps.startChild(manager, child),
    );
  }

  async waitForChildren(
    handles: readonly ChildHandle[],
    options: WaitOptions = {},
  ): Promise<ChildrenWaitResult> {
    const wait = childrenWait(handles, options);
    const result = (await this.waitStep(
      `children:${wait.children.length}`,
      wait,
    )) as ChildrenWaitResult;
    if (result.status === 'done') {
      const failed = result.children.filter(
        (c: EpisodeOutcome) => c.status === 'failed' || c.status === 'canceled',
      );
      if (failed.length > 0) throw new ChildEpisodesFailedError(failed, result.children);
    }
    return result;
  }

  /**
   * A wait: its result when a resumed run replays it; else satisfied now (journaled), or the
   * episode now waits and this run stops.
   */
  private async waitStep(name: string, wait: WaitSpec): Promise<unknown> {
    if (this.inside)
      throw new TypeError(`${name}: a wait cannot run inside a step; call it from the method`);
    const next = await this.next('wait', name);
    if (next.replayed) return next.result;
    const { stepNo, history } = next;
    this.journalNo ??= history.nextJournalNo;
    return this.traced('wait', name, stepNo, async (span) => {
      const started = performance.now();
      const done = await this.library(
        this.deps.waitStep({ stepNo, journalNo: this.journalNo as number, name, wait }),
      );
      if (done.outcome === 'waiting') {
        const waiting = new EpisodeWaiting(name, wait.kind, done.deadline);
        this.stop(waiting);
        throw waiting;
      }
      if (done.outcome === 'canceled') {
        this.stop(new EpisodeCanceledError(this.episode.id));
        throw this.signal.reason;
      }
      this.journalNo = (this.journalNo as number) + 1;
      this.written(done.outcome, performance.now() - started);
      // A signal sent in a trace: the wait that took it links to its sender.
      span.link((done.result as { traceContext?: unknown } | undefined)?.traceContext);
      return done.result;
    });
  }
}
