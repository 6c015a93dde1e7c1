import type { Attributes } from '@opentelemetry/api';
import type { EpisodeRow } from './episode-context.interface.js';

/** What a span of one journal position is: a step, a transaction step or a wait. */
export type StepKind = 'step' | 'transaction' | 'wait';

/** One step's span, ended once. */
export interface StepTrace {
  /** Runs `fn` with this step's span active: spans the host's code starts inside nest under it. */
  within<T>(fn: () => T): T;
  /** Ends the span; with `error`, as failed. */
  end(error?: unknown): void;
  /**
   * Links the span to the one a stored trace context names (a signal's sender); anything that is
   * not a W3C trace context is ignored.
   */
  link(stored: unknown): void;
}

/**
 * One run of an episode as the tracer sees it. Without a tracer every call is a no-op on shared
 * objects, so an untraced run allocates nothing for it.
 */
export interface RunTrace {
  /** Runs `fn` with the run's span active. */
  within<T>(fn: () => T): T;
  /** A span for a step this run executes now. */
  step(kind: StepKind, name: string, stepNo: number): StepTrace;
  /** A span for a step this run read back from the journal instead of running it. */
  replayed(kind: StepKind, name: string, stepNo: number): void;
  event(name: string, attributes?: Attributes): void;
  /** How the run ended (`done`, `failed`, `retrying`, `sleeping`…); `error` marks it failed. */
  outcome(outcome: string, error?: string): void;
  end(): void;
}

const NOOP_STEP: StepTrace = {
  within: (fn) => fn(),
  end: () => undefined,
  link: () => undefined,
};

export const NOOP_RUN_TRACE: RunTrace = {
  within: (fn) => fn(),
  step: () => NOOP_STEP,
  replayed: () => undefined,
  event: () => undefined,
  outcome: () => undefined,
  end: () => undefined,
};

/** How a run came to this node, as its trace records it. */
export interface RunStart {
  resumed: boolean;
  /** Recovery took the episode over from a node that stopped holding it. */
  takenOver: boolean;
}

/**
 * Traces the runs of this node (the tracing room's EpisodeTraces): the seam the runner holds, so
 * the episodes room never imports the tracer.
 */
export interface RunTracer {
  /** The trace of a run that starts now; end it with `finish`. */
  start(episode: EpisodeRow, how: RunStart): RunTrace;
  finish(episodeId: string, run: RunTrace): void;
}

export const RUN_TRACER = Symbol('CYCLIUM_RUN_TRACER');
