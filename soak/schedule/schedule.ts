/**
 * A fault schedule: the cluster a seed runs (its setup) and the operations against it, each at a
 * time after the start. Work operations run on the work lane, faults on the fault lane; both are
 * a pure function of the seed and the fixed parameters (see generateSchedule).
 */
import type { CycliumMode } from '@cyclium/nestjs';
import type { ActorId, NodeTimings, NodeWindows, WorkPayload } from '../node/node-protocol.js';

export interface SlotSetup {
  slot: number;
  actors: ActorId[];
  env: string;
  stack: string;
  /** Never faulted: a node of another env or stack, there to show what it must not touch. */
  outsider: boolean;
  /** Runs the previous deploy's `fs_alpha` (manual expectations only): a rolling deploy half done. */
  legacyAlpha: boolean;
}

export interface SeedSetup {
  seed: number;
  /** Real node processes and real signals, or worker threads in the runner's process. */
  processes: boolean;
  claims: boolean;
  /**
   * Every node subscribes to the terminal lifecycle events at boot (odd seeds), so every end must
   * write its event; on even seeds no node reads them and ends write none of their own.
   */
  lifecycleReaders: boolean;
  layout: 'one_service' | 'two_services' | 'rolling';
  outsider: 'none' | 'env' | 'stack';
  slots: SlotSetup[];
  timings: NodeTimings;
  windows: NodeWindows | null;
  /** How long the schedule's operations span. */
  durationMs: number;
  /** Database restarts are in the schedule (not when the runner was given DATABASE_URL). */
  databaseRestarts: boolean;
}

export type WorkOp =
  | {
      kind: 'trigger';
      slot: number;
      actor: ActorId;
      expectation: string;
      payload: WorkPayload;
      dedupeKey?: string;
      delayMs?: number;
      /** A `runAt` this long after the trigger is sent. */
      runAtInMs?: number;
      retryAttempts?: number;
      retryBackoffMs?: number;
    }
  | {
      kind: 'publish';
      slot: number;
      type: 'fs.work' | 'fs.subject';
      eventId: string;
      payload: WorkPayload;
    }
  /** Cancels the episode that work operation number `target` answered with. */
  | { kind: 'cancel'; slot: number; target: number };

export type FaultOp =
  /** kill -9, then the slot boots again after `backAfterMs` under its own identity or a new one. */
  | { kind: 'kill'; slot: number; backAfterMs: number; identity: 'same' | 'new' }
  /** SIGTERM (a drain), then back after `backAfterMs`. */
  | { kind: 'term'; slot: number; backAfterMs: number; identity: 'same' | 'new' }
  | { kind: 'db_restart'; downMs: number }
  /** Every node ends (kill -9, SIGTERM or a mix); after `downMs`, `first` boot, the rest `restLaterMs` later. */
  | {
      kind: 'cluster_stop';
      how: 'kill' | 'term' | 'mixed';
      downMs: number;
      first: number[];
      restLaterMs: number;
    }
  | { kind: 'retention'; slot: number }
  /**
   * For `forMs`, every episode insert fails with SQLSTATE `code` (a serialization failure, a lock or
   * statement timeout, a deadlock, a read-only server, a full disk): errors that are nobody's fault
   * in the work, so accepted work must wait them out.
   */
  | { kind: 'db_error'; code: string; forMs: number }
  /** A node's mode (or, with `actor`, one actor's override) for `forMs`, then back to full. */
  | { kind: 'mode'; slot: number | 'all'; mode: CycliumMode; actor?: ActorId; forMs: number };

export interface Timed<T> {
  /** Milliseconds after the schedule starts. */
  at: number;
  op: T;
}

/** A work operation; `n` numbers it in the order it was generated (its op id, a cancel's target). */
export interface WorkEntry extends Timed<WorkOp> {
  n: number;
}

export interface Schedule {
  setup: SeedSetup;
  work: WorkEntry[];
  faults: Array<Timed<FaultOp>>;
}

/** The parameters a schedule depends on besides its seed. */
export interface ScheduleParameters {
  durationMs: number;
  /** Force processes on or off; undefined: the seed decides (processesShare of seeds). */
  processes?: boolean;
  processesShare: number;
  claims?: boolean;
  databaseRestarts: boolean;
}

/** The op id every episode of a work operation carries in its payload. */
export function opId(seed: number, n: number): string {
  return `s${seed}-w${n}`;
}
