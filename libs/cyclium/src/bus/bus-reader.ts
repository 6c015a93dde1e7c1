import { Logger } from '@nestjs/common';
import { OutageLog } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { DbSnapshot } from './db-snapshot.js';
import type { EventLog, LoggedEvent } from './event-log.js';
import { SpacedTrigger } from '../primitives/spaced-trigger.js';

const BATCH = 500;

/** A read that filled its page and is walking the rest of what became visible by `to`. */
export interface Paging {
  to: DbSnapshot;
  /** The last row handed over: the rows up to it have gone to every ready consumer. */
  after: LoggedEvent;
}

/** Where the rows a read finds go. */
export interface ReaderSink {
  /**
   * Before each read: lets consumers that joined catch up from their stored positions to `cursor`,
   * and, when a paged read is under way (`paging`), through the rows it already handed over.
   */
  catchUp(cursor: DbSnapshot, paging?: Paging): Promise<void>;
  /**
   * Hands an event to this node's handlers (read at `readAt`, performance.now()); false when none
   * of them wanted it.
   */
  deliver(event: LoggedEvent, readAt: number): boolean;
  /** Every row visible in `snapshot` has been handed over. */
  readTo(snapshot: DbSnapshot): void;
  /** How many rows a read (or a page of it) found, handed over or not. */
  read?(count: number): void;
}

/**
 * Reads this node's channel of cyclium_events and hands each new row to the sink, in order. The
 * cursor is the snapshot of the previous read (see EventLog.readAfter), kept in memory: it starts
 * at the end of the table at boot (durable consumers catch up from their own stored positions
 * before they join the live reads: see DurableConsumers), and reads happen when a NOTIFY says so,
 * after every LISTEN (re)connect, and on a slow fallback timer, so a missed wake-up costs latency,
 * never an event. Reads never overlap, and under load they are spaced `spacingMs` apart: however
 * many wake-ups arrive meanwhile, one read serves them all.
 */
export class BusReader {
  private readonly logger = new Logger('CycliumBus');
  private readonly outage = new OutageLog(this.logger, 'reading cyclium_events');
  private from: DbSnapshot | undefined;
  private paging: Paging | undefined;
  private readonly reads: SpacedTrigger;
  private timer: NodeJS.Timeout | undefined;
  private lastReadAt: number | undefined;
  private lastLagMs: number | null = null;
  /** Reads numbered as they begin, and the number of the last one that succeeded. */
  private begun = 0;
  private succeeded = 0;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly log: EventLog,
    private readonly sink: ReaderSink,
    private readonly pollIntervalMs: number,
    spacingMs: number | (() => number),
  ) {
    this.reads = new SpacedTrigger(() => this.read(), spacingMs);
  }

  /** Takes the current end of the table as the cursor and starts the fallback timer. */
  async start(): Promise<void> {
    this.from ??= await this.log.snapshot(this.sql);
    if (this.timer) return;
    this.timer = setInterval(() => this.wake(), this.pollIntervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.reads.stop();
  }

  /** Asks for a read; coalesced with others (see SpacedTrigger). */
  wake(): void {
    if (this.from) this.reads.request();
  }

  /** Reads now and resolves once a read that began after this call has finished. */
  async catchUp(): Promise<void> {
    this.wake();
    await this.reads.idle();
  }

  /**
   * Resolves once a read that began after this call has succeeded, so every event committed before
   * the call has been handed over; a failed read is tried again, 200 ms doubling to 5 s apart. A
   * stopped reader resolves at once.
   */
  async readThrough(): Promise<void> {
    const after = this.begun;
    for (let pauseMs = 200; this.timer; pauseMs = Math.min(pauseMs * 2, 5_000)) {
      await this.catchUp();
      if (this.succeeded > after || !this.timer) return;
      await new Promise((resolve) => setTimeout(resolve, pauseMs).unref());
    }
  }

  /** Milliseconds since the last successful read, or null before the first one. */
  get lastReadAgoMs(): number | null {
    return this.lastReadAt === undefined ? null : performance.now() - this.lastReadAt;
  }

  /**
   * Age of the newest event a handler here wanted when it was read (database clock), or null before
   * any.
   */
  get lagMs(): number | null {
    return this.lastLagMs;
  }

  get failing(): boolean {
    return this.outage.failing;
  }

  private async read(): Promise<void> {
    const read = ++this.begun;
    try {
      await this.readOnce();
      this.succeeded = read;
      this.lastReadAt = performance.now();
      this.outage.succeeded();
    } catch (error) {
      // The cursor has not moved past anything undelivered: the next read starts where this one
      // did.
      this.outage.failed(error);
    }
  }

  private async readOnce(): Promise<void> {
    const from = this.from as DbSnapshot;
    await this.sink.catchUp(from, this.paging);
    if (!this.paging) {
      const { events, more, snapshot } = await this.log.readAfter(this.sql, from, BATCH);
      this.hand(events);
      if (!more) {
        this.moveTo(snapshot);
        return;
      }
      this.paging = { to: snapshot, after: events[events.length - 1] as LoggedEvent };
    }
    for (let paging = this.paging; paging; paging = this.paging) {
      const { events: page, more } = await this.log.readPage(
        this.sql,
        from,
        paging.to,
        paging.after,
        BATCH,
      );
      this.hand(page);
      if (!more) {
        this.moveTo(paging.to);
        this.paging = undefined;
        this.reads.request(); // whatever committed after `to`
        return;
      }
      this.paging = { to: paging.to, after: page[page.length - 1] as LoggedEvent };
    }
  }

  private moveTo(snapshot: DbSnapshot): void {
    this.from = snapshot;
    this.sink.readTo(snapshot);
  }

  private hand(events: LoggedEvent[]): void {
    if (events.length > 0) this.sink.read?.(events.length);
    let newest: LoggedEvent | undefined;
    const readAt = performance.now();
    for (const logged of events) if (this.sink.deliver(logged, readAt)) newest = logged;
    // Events nobody here wants may wait for the next read (see PostgresBus.wake): their age is not
    // lag.
    if (newest) this.lastLagMs = newest.ageMs;
  }
}
