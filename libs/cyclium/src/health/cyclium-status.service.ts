import { Inject, Injectable } from '@nestjs/common';
import type { Bus } from '../bus/bus.interface.js';
import { busStatusOf, type BusStatus } from '../bus/bus-status.interface.js';
import { LeaseRenewer } from '../leases/lease-renewer.service.js';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../sql/database-errors.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { CycliumMode, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumShutdown } from '../recovery/cyclium-shutdown.service.js';
import type { ReconcileResult } from '../workflows/workflow-reconciler.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { Recovery } from '../recovery/recovery.service.js';
import type { LastSweep } from '../recovery/recovery-sweep.interface.js';
import { SharedRead } from '../primitives/shared-read.js';
import {
  ClusterStatusReader,
  MAX_STATUS_WINDOW_MS,
  type ClusterStatus,
  type ClusterStatusOptions,
} from './cluster-status.service.js';

/** The thresholds of `CycliumStatus`'s readiness checks. */
export interface HealthOptions {
  /** The database must answer `SELECT 1` within this. Default 1 500. */
  timeoutMs?: number;
  /**
   * The bus's wake-up connection may be down this long before the node counts as not ready. Default
   * 10 000.
   */
  busDisconnectedMs?: number;
  /** Reuse a report this long, so a storm of probes costs one query. Default 1 000. */
  cacheMs?: number;
}

/** What an operator needs to act on, as of now. */
export interface StatusSnapshot {
  nodeIdentity: string;
  mode: CycliumMode;
  stack: string | null;
  env: string | null;
  draining: boolean;
  runningEpisodes: number;
  liveClaims: number;
  bus: BusStatus | null;
  lastSweep: LastSweep | null;
  /**
   * The last `reconcileWorkflows` this node ran (after each sweep, where the workflow engine is
   * on).
   */
  lastReconcile: { at: Date; result: ReconcileResult } | null;
}

/**
 * Why a node is not ready, as stable codes (the messages may change):
 * - `draining`: shutdown began; the node takes no new work.
 * - `database`: `SELECT 1` did not answer within `timeoutMs` (sent on the library's own connection,
 *   not the host pool).
 * - `bus_disconnected`: the bus's LISTEN connection has been down longer than `busDisconnectedMs`.
 * - `bus_degraded`: the LISTEN connection is open but does not hear its own echo (half-open, or a
 *   pooler in transaction mode).
 * - `bus_reader_failing`: the last read of the events table failed.
 * - `renewals_failing`: the last renewal of this node's work claims failed.
 */
export type ReadinessCheck =
  | 'draining'
  | 'database'
  | 'bus_disconnected'
  | 'bus_degraded'
  | 'bus_reader_failing'
  | 'renewals_failing';

/** This node's health: readiness, and each check with its detail. */
export interface HealthReport {
  /** Ready to take work: no check failed. */
  ready: boolean;
  /** The same as `ready` (the name `isHealthy` and older hosts read). */
  healthy: boolean;
  /** The failed checks, each once, in a stable order; empty when ready. */
  failing: ReadinessCheck[];
  /** Why it is not ready, one `<check>: <what>` line per failed check; empty when ready. */
  reasons: string[];
  /** The database round trip, or null when it did not answer in time. */
  databaseMs: number | null;
  status: StatusSnapshot;
}

/**
 * Liveness: the process can make progress. No database, pool or bus state goes into it: each of
 * those faults heals without a restart (and a database outage would otherwise restart every node
 * at once), while a process too wedged to make progress does not answer the probe at all.
 */
export interface LivenessReport {
  live: true;
  status: StatusSnapshot;
}

/**
 * This node's state at a glance, and the liveness and readiness verdicts the Terminus indicator
 * reports.
 */
@Injectable()
export class CycliumStatus {
  private readonly pings = new SharedRead<number, number>();
  /** The ping sent and not yet answered, if any (see ping). */
  private unanswered: { sentAt: number; answer: Promise<number> } | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly database: CycliumDataSource,
    private readonly runner: EpisodeRunner,
    private readonly renewer: LeaseRenewer,
    private readonly recovery: Recovery,
    private readonly shutdown: CycliumShutdown,
    private readonly mode: Mode,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
    private readonly clusterReader: ClusterStatusReader,
  ) {}

  /**
   * Every node and the work in the database, for operators: cheap enough for a few calls a second
   * (callers within half a second share one statement), at a cost that follows the live work and
   * the window, not the history. Throws DatabaseUnavailableError-classed errors while the database
   * is away.
   */
  cluster(options: ClusterStatusOptions = {}): Promise<ClusterStatus> {
    const windowMs = options.windowMs ?? 300_000;
    if (!Number.isInteger(windowMs) || windowMs < 1 || windowMs > MAX_STATUS_WINDOW_MS) {
      throw new RangeError(
        `cluster: windowMs must be a whole number of milliseconds from 1 to ` +
          `${MAX_STATUS_WINDOW_MS} (got ${String(windowMs)})`,
      );
    }
    return this.clusterReader.read(windowMs, 500);
  }

  /** Who this node is and what it is doing, read from memory (no query). */
  snapshot(): StatusSnapshot {
    return {
      nodeIdentity: this.identity.name(),
      mode: this.mode.current,
      stack: this.options.stackSlug,
      env: this.options.env,
      draining: this.shutdown.started,
      runningEpisodes: this.runner.inFlight().length,
      liveClaims: this.renewer.held().length,
      bus: busStatusOf(this.bus),
      lastSweep: this.recovery.lastSweep(),
      lastReconcile: this.recovery.lastReconcile(),
    };
  }

  /** Always live while it answers (see LivenessReport); costs no query. */
  liveness(): LivenessReport {
    return { live: true, status: this.snapshot() };
  }

  /**
   * Not ready while any ReadinessCheck fails. Only the database round trip is cached; the rest is
   * read fresh.
   */
  async readiness(options: HealthOptions = {}): Promise<HealthReport> {
    const { timeoutMs = 1_500, busDisconnectedMs = 10_000, cacheMs = 1_000 } = options;
    const failed: Array<[ReadinessCheck, string]> = [];
    const databaseMs = await this.cachedPing(timeoutMs, cacheMs).catch((error: unknown) => {
      failed.push(['database', errorMessage(error)]);
      return null;
    });
    const status = this.snapshot();
    const bus = status.bus;
    if (status.draining) failed.unshift(['draining', 'this node is shutting down']);
    if (bus && !bus.listening && bus.disconnectedForMs > busDisconnectedMs) {
      failed.push([
        'bus_disconnected',
        `the LISTEN connection has been down for ${Math.round(bus.disconnectedForMs / 1000)} s`,
      ]);
    }
    if (bus?.degraded)
      failed.push([
        'bus_degraded',
        bus.degradedReason ?? 'the LISTEN connection does not hear its own echo',
      ]);
    if (bus?.readFailing)
      failed.push(['bus_reader_failing', 'the last read of the events table failed']);
    if (this.renewer.failing)
      failed.push(['renewals_failing', "the last renewal of this node's work claims failed"]);
    return {
      ready: failed.length === 0,
      healthy: failed.length === 0,
      failing: failed.map(([check]) => check),
      reasons: failed.map(([check, what]) => `${check}: ${what}`),
      databaseMs,
      status,
    };
  }

  /** The readiness verdict, under its older name. */
  health(options: HealthOptions = {}): Promise<HealthReport> {
    return this.readiness(options);
  }

  /** A storm of probes costs one query. */
  /**
   * The database's round trip in ms on the library's own connection, shared by callers within
   * `cacheMs`; rejects when it does not answer within 1.5 s. Cheap enough for a page to ask twice
   * a second, so that a database that stops answering shows within a second or two.
   */
  databasePing(cacheMs = 400): Promise<number> {
    return this.cachedPing(1_500, cacheMs);
  }

  private cachedPing(timeoutMs: number, cacheMs: number): Promise<number> {
    return this.pings.get(timeoutMs, cacheMs, () => this.ping(timeoutMs));
  }

  /**
   * On the library's own connection: a host pool that is merely saturated is not a database that is
   * away. That connection is the node beat's too, so a `SELECT 1` still unanswered is shared by
   * every later ping until it settles, each timed from when it was sent: a frozen database costs
   * one stuck statement, not a queue of them in front of the beat.
   */
  private ping(timeoutMs: number): Promise<number> {
    const unanswered = this.unanswered ?? this.sendPing();
    const left = timeoutMs - (performance.now() - unanswered.sentAt);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no answer within ${timeoutMs} ms`)),
        Math.max(0, left),
      );
    });
    return Promise.race([unanswered.answer, timeout]).finally(() => clearTimeout(timer));
  }

  private sendPing(): { sentAt: number; answer: Promise<number> } {
    const sentAt = performance.now();
    const answer = this.database.dedicatedSql
      .query('SELECT 1')
      .then(() => Math.round(performance.now() - sentAt))
      .finally(() => {
        if (this.unanswered?.answer === answer) this.unanswered = undefined;
      });
    // The query may still fail after a timeout decided: that rejection is already accounted for.
    answer.catch(() => undefined);
    this.unanswered = { sentAt, answer };
    return this.unanswered;
  }
}
