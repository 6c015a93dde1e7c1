import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { MatchValue } from '../entities/waiting-for.js';
import type { TraceContext } from '../primitives/trace-context.js';

export type { MatchValue, WaitingFor } from '../entities/waiting-for.js';

/** How long a wait may last. */
export interface WaitOptions {
  /**
   * After this long (by the database clock, counted from when the wait first began, across
   * resumes) the wait ends `timed_out`. Unset: it waits until it is satisfied or canceled. A whole
   * number of milliseconds >= 0.
   */
  timeoutMs?: number;
}

/** What `ep.waitForSignal` returns: the signal, or that its deadline passed first. */
export type SignalWaitResult<T = unknown> =
  | {
      status: 'received';
      payload: T;
      signalId: string;
      sentAt: string;
      /** The trace the signal was sent in, if any (the wait's span links to it). */
      traceContext?: TraceContext;
    }
  | { status: 'timed_out' };

/** Options of `ep.waitForEvent`. */
export interface EventWaitOptions extends WaitOptions {
  /**
   * Payload fields the event must have, each equal to the value given (compared as JSON). Empty or
   * unset: the first event of the type. At most 16 fields.
   */
  match?: Readonly<Record<string, MatchValue>>;
}

/** The event that ended an event wait. */
export interface WaitedEvent<T = unknown> {
  eventId: string;
  type: string;
  payload: T;
  publishedAt: string;
}

/** What `ep.waitForEvent` returns. */
export type EventWaitResult<T = unknown> =
  { status: 'received'; event: WaitedEvent<T> } | { status: 'timed_out' };

/** Options of `ep.startChild`. */
export interface StartChildOptions {
  /**
   * Names the child within its parent: a second `startChild` with the same key in one episode
   * returns the first child. A non-empty string of at most 200 characters.
   */
  key: string;
  /** A detached child goes on when its parent is canceled. Default false. */
  detached?: boolean;
}

/** A child episode a parent started (journaled: a resumed parent gets the same handle). */
export interface ChildHandle {
  episodeId: string;
  actorId: string;
  expectationId: string;
  key: string;
}

/** How an episode ended, and what its method returned. */
export interface EpisodeOutcome<R = unknown> {
  episodeId: string;
  status: Extract<EpisodeStatus, 'done' | 'partially_failed' | 'failed' | 'canceled'>;
  /** `Convergence.result` of a converged episode; null otherwise. */
  result: R | null;
  errorClass: string | null;
  error: string | null;
}

/** What `ep.waitForChildren` returns: every child's outcome, in the order of the handles. */
export type ChildrenWaitResult =
  | { status: 'done'; children: EpisodeOutcome[] }
  | { status: 'timed_out'; children: Array<EpisodeOutcome | ChildPending> };

/** A child still live when a children wait timed out. */
export interface ChildPending {
  episodeId: string;
  status: Exclude<EpisodeStatus, 'done' | 'partially_failed' | 'failed' | 'canceled'>;
}

/** Options of `Episodes.result`. */
export interface ResultOptions {
  /** Give up after this long (EpisodeResultTimeoutError). Default 30,000. */
  timeoutMs?: number;
}

/** What `Episodes.signal` did: stored it, or found the episode ended or missing. */
export type SignalResult =
  | { status: 'sent'; signalId: string; woke: boolean }
  | { status: 'finished' }
  | { status: 'not_found' };
