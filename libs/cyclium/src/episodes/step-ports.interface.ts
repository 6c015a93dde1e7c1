import type { EntityManager } from 'typeorm';
import type { Checkpoint } from './episode-journal.js';
import type { MatchValue } from './wait.types.js';

// What a running episode asks of the rooms that write its steps, its waits and its children, and
// what they answer: the seams between RunningEpisode and StepWrites, TransactionSteps, WaitSteps
// and ChildEpisodes.

/** One completed step's journal row, as the running episode writes it. */
export interface StepRecord {
  stepNo: number;
  journalNo: number;
  name: string;
  /** The result as stored (see encodeStepResult). */
  resultJson: string;
  durationMs: number;
}

/**
 * What a fenced step write found: written (and whether a cancel is pending), or the claim is gone.
 */
export type StepWriteOutcome = 'written' | 'cancel_requested' | 'not_owner';

/** One transaction step as the running episode asks for it. */
export interface TransactionStep {
  stepNo: number;
  journalNo: number;
  name: string;
  /** The host's writes, on the manager of the step's transaction; its result is the step's. */
  run: (manager: EntityManager) => Promise<unknown>;
  /** Throws when the run must not commit any more (its claim is lost by the local clock). */
  check: () => void;
}

/** What a transaction step came to: its write's outcome, and the result and time of `run`. */
export interface TransactionStepOutcome {
  outcome: StepWriteOutcome;
  result: unknown;
  durationMs: number;
}

/** A child episode as `ep.startChild` asks for it. */
export interface ChildSpec {
  actorId: string;
  expectationId: string;
  payload: unknown;
  key: string;
  detached: boolean;
}

/** What a wait waits for, as the running episode asks for it. */
export type WaitSpec = { timeoutMs?: number } & (
  | { kind: 'signal'; name: string }
  | { kind: 'event'; type: string; match: Record<string, MatchValue> }
  | { kind: 'children'; children: string[] }
);

/** One wait as the running episode asks for it (WaitSteps). */
export interface WaitStep {
  stepNo: number;
  journalNo: number;
  name: string;
  wait: WaitSpec;
}

/**
 * What a wait came to: satisfied (or timed out) and journaled, recorded as `waiting` (the run
 * stops), or stopped by a cancel asked for meanwhile.
 */
export type WaitStepOutcome =
  | { outcome: StepWriteOutcome; result: unknown }
  | { outcome: 'waiting'; deadline: string | null }
  | { outcome: 'canceled' };

/** Where a resumed run picks up: the checkpointed results and the next free journal position. */
export interface History {
  checkpoints: Map<number, Checkpoint>;
  nextJournalNo: number;
}
