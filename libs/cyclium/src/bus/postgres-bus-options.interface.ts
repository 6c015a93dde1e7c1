import type { SqlExecutor } from '../sql/sql-executor.js';
import type { BusAudience } from './bus-audience.interface.js';
import type { EventIntegrity } from './event-appender.js';

/** Told what the bus stored and read, for metrics; each call must be cheap and must not throw. */
export interface BusObserver {
  /** Events this node stored, announced once their transaction committed. */
  published(count: number): void;
  /** Rows this node read from the events table. */
  read(count: number): void;
}

/** Options of the shipped `PostgresBus` (CycliumModule fills them from its own options). */
export interface PostgresBusOptions {
  /** Told what this node stored and read (CycliumModule passes its telemetry). Default: none. */
  observer?: BusObserver;
  /**
   * Signs the library's reserved events and ignores those that do not verify (the `integrity`
   * option). Default: none.
   */
  integrity?: EventIntegrity;
  /** The NOTIFY channel and the events' scope (see busChannel). */
  channel: string;
  stackSlug?: string | null;
  env?: string | null;
  /** Stamped on every stored event. */
  publisher?: () => string;
  /**
   * A node row not refreshed for this long no longer counts as a reader of lifecycle events (see
   * LifecycleReads). Default 300: five minutes, so a live node cut off from the database for less
   * still gets the ends of meanwhile once it is back.
   */
  readersStaleSeconds?: number;
  /** Read even without a wake-up this often. Default 10 000. */
  pollIntervalMs?: number;
  /**
   * Delete stored events older than this once every consumer's position has passed them. Default
   * 3 600 000 (one hour).
   */
  retentionMs?: number;
  /**
   * Delete events older than this even when a consumer's position has not passed them (warned and
   * counted). Default a week.
   */
  undispatchedMaxAgeMs?: number;
  /**
   * Refuse a published payload whose JSON is longer than this (at most MAX_PAYLOAD_BYTES). Default
   * 1 MiB.
   */
  maxPayloadBytes?: number;
  /**
   * At most this many publishes wait in memory for the database (queued or being stored); one
   * more is refused at once with PublishQueueFullError. Default 10 000.
   */
  publishQueueMax?: number;
  /**
   * Under load, the reads this node makes average at most one per this many milliseconds (a burst
   * of four goes at once), so one read serves everything that happened meanwhile; when idle it
   * does not wait. A function is read again each time. Default 10.
   */
  spacingMs?: number | (() => number);
  /**
   * The same for the NOTIFYs this node sends (wake-ups and dispatch signals together). Each one
   * costs every listening connection of the database a transaction, so CycliumModule grows it with
   * the cluster (see notifySpacingMs). Default: `spacingMs`.
   */
  notifySpacingMs?: number | (() => number);
  /**
   * How often this node stores its consumers' settled positions while events flow (one statement
   * for all of them, only when one moved). The positions of every node hosting an expectation go
   * to one row, the furthest wins, so CycliumModule spaces each node's writes by the cluster's size
   * and the cluster as a whole writes about once a second (see positionFlushMs: never less often
   * than four times per `undispatchedMaxAgeMs`). A function is read again each time. Default 1 000.
   */
  positionFlushMs?: number | (() => number);
  /**
   * Who else listens on the channel (CycliumModule passes Peers). While it says this node is
   * alone, wake-ups and signals are heard in-process and cost no NOTIFY. Without it, every
   * wake-up is a NOTIFY.
   */
  audience?: BusAudience;
  /**
   * The LISTEN connection's self-check (see BusEcho): an echo NOTIFY after this much quiet on the
   * channel, sent through `echoSql` (default: the `sql` the bus was given). 0 turns it off. Default
   * 10 000.
   */
  echoIntervalMs?: number;
  /** An echo not heard within this marks the bus degraded (status().degraded). Default 5 000. */
  echoTimeoutMs?: number;
  /** Where the echo NOTIFY is sent from: any connection but the LISTEN one. */
  echoSql?: SqlExecutor;
}
