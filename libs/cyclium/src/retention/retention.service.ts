import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Mode } from '../dispatch/mode.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { OutageLog } from '../sql/database-errors.js';
import { runRetentionBatch, type BatchResult } from './retention-batch.js';

/**
 * How long one pass runs batches while they come back full; a pass that runs out comes back soon.
 */
const PASS_BUDGET_MS = 5_000;
const CATCH_UP_DELAY_MS = 1_000;

/** What one pass did, summed over its batches. */
export interface RetentionPass {
  /** False when another node of this stack and env was running a pass: this one stood aside. */
  ran: boolean;
  archived: number;
  deleted: number;
  instances: number;
  /** A batch was still full when the time budget ran out: more is due now. */
  behind: boolean;
}

/**
 * Runs retention on every node, in turn by stack and env: every `retention.intervalMs` (with up
 * to a tenth of jitter, so nodes booted together do not all try at once) a pass runs batches
 * (see runRetentionBatch) while they come back full, for up to 5 s, then lets go; one that ran
 * out with work left comes back after a second, so deletion keeps up with a sustained insert
 * rate instead of falling a little further behind every minute. A disabled node does none. A
 * pass that fails (the database away) is logged once per outage and tried again at the next tick.
 */
@Injectable()
export class RetentionSchedule implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumRetention');
  private readonly outage = new OutageLog(this.logger, 'retention pass');
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<RetentionPass> | undefined;
  private stopped = false;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly mode: Mode,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onApplicationBootstrap(): void {
    const retention = this.options.retention;
    if (retention) this.next(retention.intervalMs * (1 + Math.random() / 10));
  }

  /**
   * One pass now (what the timer runs), resolving with what it did; a pass already running is
   * joined.
   */
  passNow(): Promise<RetentionPass> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  /** No pass starts after this; one under way finishes its batch and ends. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }

  private next(delay: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      const interval = this.options.retention?.intervalMs ?? 60_000;
      this.passNow().then(
        (pass) => {
          this.outage.succeeded();
          this.next(pass.behind ? CATCH_UP_DELAY_MS : interval);
        },
        (error: unknown) => {
          this.outage.failed(error);
          this.next(interval);
        },
      );
    }, delay);
    this.timer.unref();
  }

  private async pass(): Promise<RetentionPass> {
    const result: RetentionPass = {
      ran: false,
      archived: 0,
      deleted: 0,
      instances: 0,
      behind: false,
    };
    const windows = this.options.retention;
    if (!windows || this.mode.current === 'disabled') return result;
    const scope = { stack: this.options.stackSlug, env: this.options.env };
    const deadline = performance.now() + PASS_BUDGET_MS;
    for (;;) {
      const batch: BatchResult = await runRetentionBatch(this.database.sql, scope, windows);
      if (!batch.held) break;
      result.ran = true;
      result.archived += batch.archived;
      result.deleted += batch.deleted;
      result.instances += batch.instances;
      const full = Math.max(batch.archived, batch.deleted, batch.instances) >= windows.batchSize;
      if (!full) break;
      if (this.stopped || performance.now() >= deadline) {
        result.behind = full;
        break;
      }
    }
    if (result.archived + result.deleted + result.instances > 0) {
      this.logger.debug(
        `retention: archived ${result.archived} episode(s), deleted ${result.deleted} and ` +
          `${result.instances} workflow instance(s)` +
          (result.behind ? '; more is due, the next pass comes in a second' : ''),
      );
    }
    return result;
  }
}
