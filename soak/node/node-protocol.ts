/**
 * What the soak's driver and its nodes say to each other, the same over a worker thread's port
 * and a child process's IPC channel: the driver sends commands, a node answers each by its id.
 */
import type { CycliumMode } from '@cyclium/nestjs';

/** The work an episode of the fault-schedule actors does, read from its trigger's payload. */
export interface WorkPayload {
  /** The generator's operation that caused it: unique within a seed. */
  op: string;
  /** Steps `s1` … `s<steps>`. */
  steps: number;
  stepMs: number;
  /** The step (1-based) that throws, `throws` times in all (counted in fs_effects, across nodes). */
  throwAt?: number;
  throws?: number;
  /** An `ep.sleep('nap', sleepMs)` before step `sleepBefore`. */
  sleepBefore?: number;
  sleepMs?: number;
  /** Outputs of type `fs.report` the episode proposes when it converges. */
  outputs?: number;
  /** The debounce and cooldown subject (`fs.subject` events). */
  subject?: string;
}

export type ActorId = 'fs_alpha' | 'fs_beta';

export interface NodeTimings {
  leaseSeconds: number;
  staleAfterMs: number;
  settleMs: number;
  sweepIntervalMs: number;
  beatMs: number;
  pollMs: number;
  /** triggerPollIdleIntervalMs: an idle node lets its poll ticks pass up to this long. */
  idlePollMs: number;
  busPollMs: number;
  shutdownMs: number;
  notHostedGraceMs: number;
  triggerRequestTtlMs: number;
  outputRetryBaseMs: number;
}

/** Retention windows; null keeps the library's defaults. */
export interface NodeWindows {
  busRetentionMs: number;
  busUndispatchedMaxAgeMs: number;
  archiveAfter: number;
  deleteAfter: number;
  intervalMs: number;
}

export interface FaultNodeConfig {
  databaseUrl: string;
  nodeId: string;
  /** application_name of every connection: a kill terminates this incarnation's backends by it. */
  appName: string;
  env: string;
  stack: string | null;
  actors: ActorId[];
  /**
   * Hosts `fs_alpha` as the previous deploy did: its manual expectations only (a rolling deploy's
   * old node), so the wake-ups, restarts and queued rows of the others are not its to take.
   */
  legacyAlpha: boolean;
  claims: boolean;
  /** Subscribes to every terminal lifecycle event at boot (SeedSetup.lifecycleReaders). */
  lifecycleReaders: boolean;
  mode: CycliumMode;
  timings: NodeTimings;
  windows: NodeWindows | null;
}

export interface TriggerCommand {
  cmd: 'trigger';
  actor: ActorId;
  expectation: string;
  payload: WorkPayload;
  dedupeKey?: string;
  delayMs?: number;
  /** ISO time. */
  runAt?: string;
  retryAttempts?: number;
  /** The first backoff of that retry policy (0: the next attempt is due at once). */
  retryBackoffMs?: number;
}

export type NodeCommand =
  | TriggerCommand
  | { cmd: 'publish'; type: string; eventId: string; payload: WorkPayload }
  | { cmd: 'cancel'; episodeId: string }
  | { cmd: 'mode'; mode: CycliumMode }
  | { cmd: 'actor_mode'; actor: ActorId; mode: CycliumMode | null }
  | { cmd: 'retention' }
  | { cmd: 'drain' };

/** What a node answered; `unavailable` marks an error that says the database was away. */
export type NodeAnswer =
  | { ok: true; status?: string; episodeId?: string | null; detail?: string }
  | { ok: false; error: string; unavailable: boolean };

export type NodeMessage =
  | { type: 'ready'; identity: string }
  | { type: 'boot_failed'; error: string; errorName: string }
  | { type: 'answer'; id: number; answer: NodeAnswer }
  | { type: 'drained' };

export type DriverMessage = { id: number; command: NodeCommand };

/** The terminal lifecycle event an episode's end writes, by the status it ends in. */
export const TERMINAL_EVENTS: Readonly<Record<string, string>> = {
  done: 'episode.completed',
  partially_failed: 'episode.completed',
  failed: 'episode.failed',
  canceled: 'episode.canceled',
};
