import type { BusEvent } from './bus.interface.js';
import type { DbSnapshot } from './db-snapshot.js';
import type { DurableHandler } from './durable-subscriptions.interface.js';
import type { LoggedEvent } from './event-log.js';

/**
 * A read's worth of deliveries: settled once `open` reaches 0; `into` points at the mark it was
 * merged into.
 */
interface Mark {
  snapshot: DbSnapshot | undefined;
  open: number;
  events: number;
  into?: Mark;
}

/**
 * Marks kept per consumer; beyond it the newest two merge (the position then moves in bigger steps,
 * never too far).
 */
const MAX_MARKS = 64;

/**
 * One durable consumer on one node: its handler, and how far its events have settled. Each read
 * of the reader ends a mark (the read's snapshot, and the deliveries made during it); the position
 * may move to a mark's snapshot once it and every mark before it has settled, so it never passes
 * an event whose dispatch is still under way, waiting out a debounce, or was dropped by a drain.
 */
export class DurableConsumer {
  /**
   * False until the consumer has caught up from its stored position; the live reads skip it until
   * then.
   */
  ready = false;
  active = true;
  private marks: Mark[] = [];
  private current: Mark = { snapshot: undefined, open: 0, events: 0 };
  private settled: DbSnapshot | undefined;
  private written: DbSnapshot | undefined;
  private settledEvents = false;
  /** Events handed to the handler whose settling it still waits for. */
  private open = 0;

  constructor(
    readonly name: string,
    readonly type: string,
    private readonly handler: DurableHandler,
    private readonly skip: (consumer: string, event: BusEvent, error: unknown) => void,
  ) {}

  deliver(logged: LoggedEvent, readAt: number): void {
    const mark = this.current;
    mark.open++;
    mark.events++;
    this.open++;
    const receipt = { committedAt: logged.committedAt, ageMs: logged.ageMs, readAt };
    let settling: Promise<void>;
    try {
      settling = this.handler(logged.event, receipt);
    } catch (error) {
      settling = Promise.reject(error);
    }
    settling.then(
      () => this.close(mark),
      (error: unknown) => {
        this.skip(this.name, logged.event, error);
        this.close(mark);
      },
    );
  }

  /** Everything delivered since the last call was read with `snapshot`. */
  readTo(snapshot: DbSnapshot): void {
    this.current.snapshot = snapshot;
    this.marks.push(this.current);
    this.current = { snapshot: undefined, open: 0, events: 0 };
    if (this.marks.length > MAX_MARKS) {
      const newest = this.marks.pop() as Mark;
      const kept = this.marks[this.marks.length - 1] as Mark;
      kept.snapshot = newest.snapshot;
      kept.open += newest.open;
      kept.events += newest.events;
      newest.into = kept;
    }
    this.advance();
  }

  /**
   * The position to store, when it moved: at once after events settled, and with `idle` also when
   * only reads without events for it moved it (so retention can pass what nobody here wanted).
   */
  take(idle: boolean): DbSnapshot | undefined {
    if (!this.settled || this.settled === this.written || !(this.settledEvents || idle))
      return undefined;
    this.settledEvents = false;
    this.written = this.settled;
    return this.settled;
  }

  /** The write of what `take` returned failed: offer it again next time. */
  untake(): void {
    this.written = undefined;
    this.settledEvents = true;
  }

  /** Events handed over and not settled yet: what this consumer holds in memory. */
  get unsettled(): number {
    return this.open;
  }

  private close(mark: Mark): void {
    this.open--;
    let target = mark;
    while (target.into) target = target.into;
    target.open--;
    this.advance();
  }

  private advance(): void {
    for (let head = this.marks[0]; head && head.open === 0; head = this.marks[0]) {
      this.marks.shift();
      this.settled = head.snapshot;
      if (head.events > 0) this.settledEvents = true;
    }
  }
}
