import { Inject, Injectable } from '@nestjs/common';
import type { Bus } from '../bus/bus.interface.js';
import { busStatusOf, type BusStatus } from '../bus/bus-status.interface.js';
import { LeaseRenewer } from '../claims/lease-renewer.service.js';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../database/database-errors.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { CycliumMode, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumShutdown } from '../recovery/cyclium-shutdown.service.js';
import type { ReconcileResult } from '../workflows/workflow-reconciler.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { Recovery, type LastSweep } from '../recovery/recovery.service.js';

export interface HealthOptions {
  /** The database must answer `SELECT 1` within this. Default 1 500. */
  timeoutMs?: number;
  /** The bus's wake-up connection may be down this long before the node counts as unhealthy. Default 10 000. */
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
  /** The last `reconcileWorkflows` this node ran (after each sweep, where the workflow engine is on). */
  lastReconcile: { at: Date; result: ReconcileResult } | null;
}

export interface HealthReport {
  healthy: boolean;
  /** Why it is not healthy; empty when it is. */
  reasons: string[];
  /** The database round trip, or null when it did not answer in time. */
  databaseMs: number | null;
  status: StatusSnapshot;
}

/** This node's state at a glance, and the health verdict the Terminus indicator reports. */
@Injectable()
export class CycliumStatus {
  private cached: { key: string; at: number; report: Promise<HealthReport> } | undefined;

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
  ) {}

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

  /**
   * Unhealthy when the database does not answer within `timeoutMs`, when the bus's wake-up
   * connection has been down longer than `busDisconnectedMs`, or while the node drains.
   */
  health(options: HealthOptions = {}): Promise<HealthReport> {
    const { timeoutMs = 1_500, busDisconnectedMs = 10_000, cacheMs = 1_000 } = options;
    const key = `${timeoutMs}:${busDisconnectedMs}`;
    const now = performance.now();
    if (this.cached && this.cached.key === key && now - this.cached.at < cacheMs) return this.cached.report;
    const report = this.measure(timeoutMs, busDisconnectedMs);
    this.cached = { key, at: now, report };
    return report;
  }

  private async measure(timeoutMs: number, busDisconnectedMs: number): Promise<HealthReport> {
    const reasons: string[] = [];
    const databaseMs = await this.ping(timeoutMs).catch((error: unknown) => {
      reasons.push(`database: ${errorMessage(error)}`);
      return null;
    });
    const status = this.snapshot();
    if (status.bus && !status.bus.listening && status.bus.disconnectedForMs > busDisconnectedMs) {
      reasons.push(`bus: the wake-up connection has been down for ${Math.round(status.bus.disconnectedForMs / 1000)} s`);
    }
    if (status.draining) reasons.push('draining: this node is shutting down');
    return { healthy: reasons.length === 0, reasons, databaseMs, status };
  }

  private ping(timeoutMs: number): Promise<number> {
    const started = performance.now();
    const query = this.database.sql.query('SELECT 1').then(() => Math.round(performance.now() - started));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    // The query may still fail after the timeout decided: that rejection is already accounted for.
    query.catch(() => undefined);
    return Promise.race([query, timeout]).finally(() => clearTimeout(timer));
  }
}
