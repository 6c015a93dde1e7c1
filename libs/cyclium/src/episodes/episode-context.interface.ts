import type { EntityManager } from 'typeorm';
import type { FindingAction } from '../findings/finding-action.interface.js';
import type { OutputProposal } from '../outputs/output-proposal.interface.js';
import type { CycliumEpisode } from '../entities/episode.entity.js';
import type { TraceContext } from '../primitives/trace-context.js';
import type {
  ChildHandle,
  ChildrenWaitResult,
  EventWaitOptions,
  EventWaitResult,
  SignalWaitResult,
  StartChildOptions,
  WaitOptions,
} from './wait.types.js';

/** An episode as stored in `cyclium_episodes`. */
export type EpisodeRow = CycliumEpisode;

/** What started an episode, and its payload. */
export interface EpisodeTrigger<P = unknown> {
  type: 'event' | 'schedule' | 'manual' | 'workflow';
  eventType?: string;
  eventId?: string;
  payload: P;
  /** The schedule bucket or cron tick this run belongs to (ISO). */
  scheduledAt?: string;
  /**
   * The retry policy `Episodes.trigger` gave this episode over its expectation's (`false`: no
   * retries).
   */
  retry?: RetryPolicy | false;
  /** The parent of a child episode (`ep.startChild`). */
  parent?: { episodeId: string; key: string; detached: boolean };
  /** The priority `Episodes.trigger` gave this episode over its expectation's. */
  priority?: number;
  /**
   * The W3C trace context active where the trigger was made (an `Episodes.trigger` inside a traced
   * request, a child started in a traced run): every run of the episode continues that trace.
   */
  traceContext?: TraceContext;
}

/** What `ep.step` hands its function: the step's number and idempotency key. */
export interface StepTools {
  /** 1-based position of this step in the episode; stable across resumes. */
  stepNo: number;
  /** `<episode id>:<step no>`: pass it to external systems so a retried step is recognised. */
  idempotencyKey: string;
  signal: AbortSignal;
}

/** What an expectation method receives. */
export interface EpisodeContext<P = unknown> {
  readonly episode: EpisodeRow;
  readonly trigger: EpisodeTrigger<P>;
  /** Aborts on claim loss, drain, cancel and budget; steps check it before they start. */
  readonly signal: AbortSignal;
  /** The claim's fence, or null with claims off. */
  readonly fence: number | null;
  /**
   * True when this run continues an interrupted one: checkpointed steps return their stored result.
   */
  readonly resumed: boolean;
  /**
   * The unit of progress: checks the signal, runs `fn`, and records its result (journal +
   * checkpoint, fenced) before returning it. `fn`'s result must be JSON-serialisable.
   */
  step<T>(name: string, fn: (tools: StepTools) => Promise<T> | T): Promise<T>;
  /**
   * A step whose database writes happen exactly once: `fn` runs in a transaction on the library's
   * DataSource, and its writes (through `manager`), the step's journal row and checkpoint, and the
   * proof that this run still owns the episode at its fence commit together or not at all. A
   * resumed run returns the recorded result of a committed one without calling `fn`; one that did
   * not commit runs again, whole (also after a serialization failure, a deadlock or a dropped
   * connection, while this node owns the episode). A stale holder's attempt fails on the fence
   * and its writes roll back. `fn`'s result must be JSON-serialisable; calls to outside systems
   * belong in `step`.
   */
  transaction<T>(
    name: string,
    fn: (manager: EntityManager, tools: StepTools) => Promise<T>,
  ): Promise<T>;
  /**
   * A durable sleep: journals the wake-up time (a step named `sleep:<name>`), and the episode gives
   * up its slot and waits (`waiting`) until then; any node hosting the actor resumes it when due,
   * after restarts and deploys, and the call returns there. `ms` is a whole number >= 0.
   */
  sleep(name: string, ms: number): Promise<void>;
  /**
   * Waits for the next undelivered signal `name` sent to this episode (`Episodes.signal`), one
   * sent before the wait began included, or until `timeoutMs` (database clock) passes. Each signal
   * is delivered to one wait, once. Until then the episode is `waiting` (no slot, no claim), and
   * any node hosting the expectation resumes it when the signal arrives or the deadline passes;
   * the call returns there. Journaled as a step named `signal:<name>`.
   */
  waitForSignal<T = unknown>(name: string, options?: WaitOptions): Promise<SignalWaitResult<T>>;
  /**
   * Waits for the first bus event of `type` committed after the wait began whose payload has every
   * field of `match` equal to the value given, or until `timeoutMs`. Needs `bus: 'postgres'`.
   * Journaled as a step named `event:<type>`.
   */
  waitForEvent<T = unknown>(type: string, options?: EventWaitOptions): Promise<EventWaitResult<T>>;
  /**
   * Starts a child episode once (journaled as `child:<key>`, in one transaction with the child's
   * row: a resumed parent gets the same handle); any node hosting its actor runs it. Canceling the
   * parent cancels it, unless `detached`.
   */
  startChild<C = unknown>(
    actorId: string,
    expectationId: string,
    payload: C,
    options: StartChildOptions,
  ): Promise<ChildHandle>;
  /**
   * Waits until every child of `handles` has ended (one wake-up of the parent for all of them), or
   * until `timeoutMs`; returns their outcomes and results. When any failed or was canceled, throws
   * ChildEpisodesFailedError (which the method may catch).
   */
  waitForChildren(
    handles: readonly ChildHandle[],
    options?: WaitOptions,
  ): Promise<ChildrenWaitResult>;
  /**
   * Branches between old and new code at this point of the method: true for an episode that
   * reaches it on code that has the patch (a marker step `patch:<id>` is journaled with the next
   * step), false for a resumed episode whose journal passed this point before the patch existed.
   * Call it from the method, the same way on every run, and keep the old branch until no running
   * episode needs it (then `deprecatePatch`). A node whose code lacks the patch hands an episode
   * that took it back, to a node that has it.
   */
  patched(id: string): boolean;
  /**
   * The patch `id` once the old branch is deleted: an episode that reaches this point journals the
   * marker as `patched` does (so nodes still running `patched(id)` replay it correctly); one whose
   * journal passed it before the patch existed fails with PatchDeprecatedError, naming the patch.
   */
  deprecatePatch(id: string): void;
}

/** What an expectation method may return. */
export interface Convergence {
  findings?: FindingAction[];
  outputs?: OutputProposal[];
  summary?: string;
  classification?: unknown;
  /** Default `done`; `partially_failed` records that part of the work did not succeed. */
  status?: 'done' | 'partially_failed';
  /**
   * The episode's result (any JSON): stored with its end, returned by `Episodes.result` and to a
   * parent's `ep.waitForChildren`.
   */
  result?: unknown;
}

/**
 * What the runner is handed to run an episode: the method (bound to its instance) and its budget.
 * The runner never looks actors up; whoever launches the run (the actor's slots) knows the method.
 */
export interface EpisodeMethod {
  handler: (context: unknown) => Promise<unknown>;
  options: {
    budget?: EpisodeBudget;
    retry?: RetryPolicy;
    retryable?: (error: unknown) => boolean;
    version?: string;
    accepts?: readonly string[];
  };
}

/**
 * How an episode that throws is tried again: up to `attempts` runs in all, each after a backoff of
 * `initialMs × factor^(retries so far)`, at most `maxMs`, plus up to `jitter` of it at random. A
 * retry resumes from the journal: steps that completed return their recorded results.
 */
export interface RetryPolicy {
  /** Runs in all, the first included: a whole number >= 2 (1 would never retry). */
  attempts: number;
  /** Defaults: 1 s, doubling, at most 5 minutes. */
  backoff?: { initialMs?: number; factor?: number; maxMs?: number };
  /** Up to this fraction of the backoff added at random, between 0 (the default) and 1. */
  jitter?: number;
}

/** Stop before the next step once either is reached; the episode fails with `budget_exceeded`. */
export interface EpisodeBudget {
  maxSteps?: number;
  maxWallMs?: number;
}
