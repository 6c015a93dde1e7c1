import { Logger } from '@nestjs/common';
import { OutageLog } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { EventLog } from './event-log.js';

const BATCH = 1_000;
const BATCHES_PER_PASS = 20;

/**
 * Deletes events past the retention window once every position on their channel has passed them,
 * and past `undispatchedMaxAgeMs` whatever the positions (warned and counted): see EventLog.prune.
 * A pass runs every quarter of the window (between 1 s and a minute), one node at a time.
 */
export class BusRetention {
  private readonly logger = new Logger('CycliumBus');
  private readonly outage = new OutageLog(this.logger, 'pruning cyclium_events');
  private timer: NodeJS.Timeout | undefined;
  private pruning: Promise<void> | undefined;
  private undispatched = 0;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly log: EventLog,
    private readonly retentionMs: number,
    private readonly undispatchedMaxAgeMs: number,
  ) {}

  /** Events deleted since boot that a consumer had not dispatched. */
  get undispatchedPruned(): number {
    return this.undispatched;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.prune(), Math.min(60_000, Math.max(1_000, this.retentionMs / 4)));
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.pruning;
  }

  /** Deletes what is due now, in batches; resolves with the count. */
  async pruneNow(): Promise<number> {
    let total = 0;
    let undispatched = 0;
    for (let pass = 0; pass < BATCHES_PER_PASS; pass++) {
      const pruned = await this.log.prune(this.sql, this.retentionMs, this.undispatchedMaxAgeMs, BATCH);
      total += pruned.deleted;
      undispatched += pruned.undispatched;
      if (pruned.deleted < BATCH) break;
    }
    if (undispatched > 0) {
      this.undispatched += undispatched;
      this.logger.warn(
        `deleted ${undispatched} event(s) older than busUndispatchedMaxAgeMs (${this.undispatchedMaxAgeMs} ms) that a consumer ` +
          `had not dispatched: no node hosting it read them in time (see cyclium_bus_positions)`,
      );
    }
    return total;
  }

  private prune(): void {
    this.pruning ??= this.pruneNow()
      .then(
        () => this.outage.succeeded(),
        (error: unknown) => this.outage.failed(error),
      )
      .finally(() => (this.pruning = undefined));
  }
}
