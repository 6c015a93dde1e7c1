import { Logger } from '@nestjs/common';
import { OutageLog } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { EventLog, PruneKey, PruneWindows } from './event-log.js';

/**
 * Rows one batch examines, in one short transaction. 5,000 prunes faster, but with statistics taken
 * while the table was small the planner reads that limit as "most of the table" and scans it all;
 * 1,000 keeps the index, and a pass of them still prunes many times the append rate (the bus
 * bench).
 */
const BATCH = 1_000;
/**
 * How long one pass runs batches; a pass that runs out with rows left comes back after CATCH_UP_MS.
 */
const PASS_BUDGET_MS = 5_000;
const CATCH_UP_MS = 1_000;

/** What one pass did. */
export interface PrunePass {
  deleted: number;
  /** Batches ran out of time with expired rows left: the next pass comes soon. */
  behind: boolean;
}

/**
 * Deletes this node's channel's events (its stack and env: no other's) past the retention window
 * once every position on the channel has passed them, and past `undispatchedMaxAgeMs` whatever the
 * positions (warned and counted): see EventLog.prune. A pass walks the channel in batches while
 * they come back full, for up to 5 s, one node of the channel at a time; it runs every quarter of
 * the window (between 1 s and a minute), and when it ran out of time the next one goes on from
 * where it stopped a second later, so pruning keeps up with a sustained append rate and a backlog
 * (after an outage) drains at most of the pruning rate.
 */
export class BusRetention {
  private readonly logger = new Logger('CycliumBus');
  private readonly outage = new OutageLog(this.logger, 'pruning cyclium_events');
  private timer: NodeJS.Timeout | undefined;
  private pruning: Promise<PrunePass> | undefined;
  private undispatched = 0;
  private stopped = true;
  /**
   * Where the next pass starts: past the last row examined when a pass ran out of time, else the
   * channel's start.
   */
  private after: PruneKey | undefined;

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
    if (!this.stopped) return;
    this.stopped = false;
    this.next(this.intervalMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.pruning?.catch(() => undefined);
  }

  /** One pass now (a pass under way is joined); resolves with the count deleted. */
  async pruneNow(): Promise<number> {
    return (await this.pass()).deleted;
  }

  private get windows(): PruneWindows {
    return { olderThanMs: this.retentionMs, undispatchedMs: this.undispatchedMaxAgeMs };
  }

  private get intervalMs(): number {
    return Math.min(60_000, Math.max(1_000, this.retentionMs / 4));
  }

  private next(delay: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.pass().then(
        (pass) => {
          this.outage.succeeded();
          this.next(pass.behind ? CATCH_UP_MS : this.intervalMs);
        },
        (error: unknown) => {
          this.outage.failed(error);
          this.next(this.intervalMs);
        },
      );
    }, delay);
    this.timer.unref();
  }

  private pass(): Promise<PrunePass> {
    this.pruning ??= this.walk().finally(() => (this.pruning = undefined));
    return this.pruning;
  }

  private async walk(): Promise<PrunePass> {
    const deadline = performance.now() + PASS_BUDGET_MS;
    let after = this.after;
    this.after = undefined;
    let deleted = 0;
    let undispatched = 0;
    let behind = false;
    for (;;) {
      const batch = await this.log.prune(this.sql, this.windows, BATCH, after);
      deleted += batch.deleted;
      undispatched += batch.undispatched;
      if (!batch.held || batch.young || batch.examined < BATCH || batch.last === null) break;
      after = batch.last;
      if (performance.now() >= deadline) {
        // The next pass goes on from here, so rows it must keep are read once per walk of the
        // channel.
        this.after = after;
        behind = true;
        break;
      }
    }
    if (undispatched > 0) {
      this.undispatched += undispatched;
      this.logger.warn(
        `deleted ${undispatched} event(s) older than busUndispatchedMaxAgeMs ` +
          `(${this.undispatchedMaxAgeMs} ms) that a consumer ` +
          `had not dispatched: no node hosting it read them in time (see cyclium_bus_positions)`,
      );
    }
    return { deleted, behind: behind && !this.stopped };
  }
}
