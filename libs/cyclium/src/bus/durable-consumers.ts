import { Logger } from '@nestjs/common';
import { OutageLog, errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { BusEvent } from './bus.interface.js';
import type { BusPositions, NamedConsumer } from './bus-positions.js';
import type { Paging } from './bus-reader.js';
import type { DbSnapshot } from './db-snapshot.js';
import { DurableConsumer } from './durable-consumer.js';
import type { DurableHandler } from './durable-subscriptions.interface.js';
import type { EventLog, LoggedEvent } from './event-log.js';

const PAGE = 500;
type Group = readonly DurableConsumer[];

/**
 * This node's durable consumers of one channel. A consumer that joins first catches up, inside the
 * reader's serial reads: the events of its type committed after its stored position and visible
 * in the reader's cursor, then the live reads. Settled positions are written in one statement per
 * node, every `flushMs` (and on a drain), only when one moved.
 */
export class DurableConsumers {
  private readonly logger = new Logger('CycliumBus');
  private readonly byType = new Map<string, Set<DurableConsumer>>();
  private joining: DurableConsumer[] = [];
  /** Unsubscribed since the last flush: their last settled position is still worth storing. */
  private leaving: DurableConsumer[] = [];
  private lastIdleWrite = performance.now();
  private readonly outage = new OutageLog(this.logger, 'storing bus positions');
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  /** The reader's first cursor: the end of the table when this node began to read. */
  private boot: DbSnapshot | undefined;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly log: EventLog,
    private readonly positions: BusPositions,
    /** Read again before each wait. */
    private readonly flushMs: () => number,
    /**
     * Positions that only idle reads moved are stored this seldom (retention needs them, nothing
     * else).
     */
    private readonly idleWriteMs: number,
  ) {}

  /** Stores settled positions every `flushMs` from now on. */
  start(): void {
    if (this.timer) return;
    const schedule = () => {
      this.timer = setTimeout(
        () => void this.flush(false).then(() => this.timer && schedule()),
        this.flushMs(),
      );
      this.timer.unref();
    };
    schedule();
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.flushing;
  }

  add(name: string, type: string, handler: DurableHandler): () => void {
    const consumer = new DurableConsumer(name, type, handler, (who, event, error) =>
      this.skipped(who, event, error),
    );
    let set = this.byType.get(type);
    if (!set) this.byType.set(type, (set = new Set()));
    set.add(consumer);
    this.joining.push(consumer);
    return () => {
      consumer.active = false;
      if (consumer.ready) this.leaving.push(consumer);
      set.delete(consumer);
      if (set.size === 0 && this.byType.get(type) === set) this.byType.delete(type);
    };
  }

  /** Events this node's consumers were handed and have not settled yet. */
  get unsettled(): number {
    let count = 0;
    for (const consumers of this.byType.values())
      for (const consumer of consumers) count += consumer.unsettled;
    return count;
  }

  wants(type: string): boolean {
    return this.byType.has(type);
  }

  /**
   * Catches up the consumers that joined since the last read, up to the reader's `cursor`; during a
   * paged read (one interrupted by an error, say) also through the rows its pages already handed
   * to the others, which the pages still to come will not repeat.
   */
  async catchUp(cursor: DbSnapshot, paging?: Paging): Promise<void> {
    this.boot ??= cursor;
    // Every read asks: nothing to allocate when nobody joined.
    if (this.joining.length === 0) return;
    const joining = this.joining.filter((c) => c.active);
    if (joining.length === 0) {
      this.joining = [];
      return;
    }
    // A consumer with no row yet starts at this node's boot, even one that joins later (enabled
    // again, say).
    const stored = await this.positions.open(this.sql, joining, this.boot);
    // Consumers stored at the same position (one node's flush writes them together) share one
    // replay.
    const groups = new Map<string, { from: DbSnapshot; consumers: DurableConsumer[] }>();
    for (const consumer of joining) {
      const from = stored.get(consumer.name) ?? cursor;
      const group = groups.get(from.text) ?? { from, consumers: [] };
      group.consumers.push(consumer);
      groups.set(from.text, group);
    }
    for (const { from, consumers } of groups.values()) await this.replay(from, cursor, consumers);
    for (const consumer of joining) consumer.readTo(cursor);
    // Delivered after the mark at `cursor`: they settle with the read's last page, at `paging.to`.
    if (paging) await this.replay(cursor, paging.to, joining, paging.after);
    for (const consumer of joining) consumer.ready = true;
    // Keep only those that joined during the awaits above; an unsubscribed one has nothing to catch
    // up.
    this.joining = this.joining.filter((c) => c.active && !joining.includes(c));
  }

  /** Hands a live event to the ready consumers of its type; false when there are none. */
  deliver(logged: LoggedEvent, readAt: number): boolean {
    const consumers = this.byType.get(logged.event.type);
    if (!consumers) return false;
    for (const consumer of consumers) if (consumer.ready) consumer.deliver(logged, readAt);
    return true;
  }

  readTo(snapshot: DbSnapshot): void {
    for (const consumers of this.byType.values())
      for (const consumer of consumers) if (consumer.ready) consumer.readTo(snapshot);
  }

  /**
   * Stores the positions that moved; `all` also those only idle reads moved (a drain, or now and
   * then). One at a time; a failure is logged once per outage and the positions are offered again.
   */
  flush(all: boolean): Promise<void> {
    this.flushing ??= this.write(all)
      .then(
        () => this.outage.succeeded(),
        (error: unknown) => this.outage.failed(error),
      )
      .finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  private async write(all: boolean): Promise<void> {
    const idle = all || performance.now() - this.lastIdleWrite >= this.idleWriteMs;
    // By name: a consumer that left and its successor of the same name store one position, the
    // successor's.
    const taken = new Map<string, { consumer: NamedConsumer; position: DbSnapshot }>();
    const from: DurableConsumer[] = [];
    const leaving = this.leaving.splice(0);
    for (const consumer of [...leaving, ...[...this.byType.values()].flatMap((set) => [...set])]) {
      const position = consumer.ready ? consumer.take(idle) : undefined;
      if (position) {
        taken.set(consumer.name, { consumer, position });
        from.push(consumer);
      }
    }
    if (idle) this.lastIdleWrite = performance.now();
    try {
      await this.positions.advance(this.sql, [...taken.values()]);
    } catch (error) {
      for (const consumer of from) consumer.untake();
      throw error;
    }
  }

  /**
   * Hands `consumers` the rows new since `from` and visible in `to`, in order, up to `through` when
   * given.
   */
  private async replay(
    from: DbSnapshot,
    to: DbSnapshot,
    consumers: Group,
    through?: LoggedEvent,
  ): Promise<void> {
    const types = new Set(consumers.map((c) => c.type));
    let after: LoggedEvent | undefined;
    for (;;) {
      const { events: page, more } = await this.log.readPage(this.sql, from, to, after, PAGE);
      const readAt = performance.now();
      for (const logged of page) {
        if (through && isAfter(logged, through)) return;
        if (logged.oversizedBytes !== null) this.skipOversized(logged, consumers);
        if (!logged.trusted || logged.oversizedBytes !== null || !types.has(logged.event.type))
          continue;
        for (const consumer of consumers)
          if (consumer.active && consumer.type === logged.event.type)
            consumer.deliver(logged, readAt);
      }
      if (!more) return;
      after = page[page.length - 1];
    }
  }

  /**
   * A row whose payload no read loads (EventLog's budget): written past this library's writers, it
   * is nobody's to dispatch. It is logged, and counted as skipped for each consumer of its type
   * that reads it (`among`: those of a replay; by default the ready ones), whose position passes
   * it.
   */
  skipOversized(logged: LoggedEvent, among?: readonly DurableConsumer[]): void {
    const bytes = logged.oversizedBytes;
    const reason = new Error(
      `its payload is ${bytes} bytes of text, over what a bus read loads; left unread`,
    );
    const consumers =
      among ?? [...(this.byType.get(logged.event.type) ?? [])].filter((c) => c.ready);
    const skipping = consumers.filter((c) => c.active && c.type === logged.event.type);
    const what = `event ${logged.id} ("${logged.event.type}")`;
    if (skipping.length === 0) this.logger.warn(`ignored ${what}: ${reason.message}`);
    for (const consumer of skipping) this.skipped(consumer.name, logged.event, reason);
  }

  private skipped(consumer: string, event: BusEvent, error: unknown): void {
    const reason = errorMessage(error);
    this.logger.warn(`${consumer} skipped event ${event.eventId} ("${event.type}"): ${reason}`);
    this.positions
      .skipped(this.sql, consumer, `event ${event.eventId}: ${reason}`)
      .catch((failure: unknown) => {
        this.logger.warn(
          `could not record that ${consumer} skipped event ${event.eventId}: ` +
            `${errorMessage(failure)}`,
        );
      });
  }
}

/** Rows are read in (tx_id, id) order; both are 64-bit, kept as decimal strings. */
function isAfter(a: LoggedEvent, b: LoggedEvent): boolean {
  const [ax, bx] = [BigInt(a.txId), BigInt(b.txId)];
  return ax !== bx ? ax > bx : BigInt(a.id) > BigInt(b.id);
}
