/**
 * When an idle trigger poller may let its interval ticks pass. A poll that found nothing due, left
 * nothing behind and had nothing else to look at learns, from the same statement, how soon the
 * next request it could take falls due; ticks before then (and at most `idleMs` after the poll)
 * read nothing. A request written on this node moves that time earlier (dueIn); one written on
 * another comes with a wake-up over the bus, which polls at once whatever this says. So the
 * ticks skipped are those that could only have found a wake-up lost with the node that wrote it,
 * and such a request is found within `idleMs` rather than one interval.
 *
 * Times are on the monotonic clock (performance.now()). Due times come from the database clock as
 * durations, counted from when the poll was sent, so they fall no later than the database's.
 */
export class PollQuiet {
  private quietUntil = 0;

  constructor(
    /** The longest an idle poller goes without polling; not above the interval: never quiet. */
    private readonly idleMs: number,
    private readonly intervalMs: number,
  ) {}

  /** Whether an interval tick at `now` polls. */
  ticks(now = performance.now()): boolean {
    return now >= this.quietUntil;
  }

  /**
   * A poll sent at `sentAt` came back: `busy` when it found something to do or left something
   * behind (every tick polls then), otherwise the first request it could not take yet falls due
   * in `nextDueInMs` (null: none within `idleMs`).
   */
  polled(sentAt: number, busy: boolean, nextDueInMs: number | null): void {
    this.quietUntil =
      busy || this.idleMs <= this.intervalMs
        ? 0
        : sentAt + Math.min(this.idleMs, nextDueInMs ?? Number.POSITIVE_INFINITY);
  }

  /** A request written here falls due in `ms`: the tick after that polls. */
  dueIn(ms: number, now = performance.now()): void {
    this.quietUntil = Math.min(this.quietUntil, now + ms);
  }

  /** Every tick polls until a poll says otherwise (one failed, say). */
  reset(): void {
    this.quietUntil = 0;
  }

  /** How far a poll looks ahead for the next due time: as far as it may stay quiet. */
  get horizonMs(): number {
    return this.idleMs > this.intervalMs ? this.idleMs : 0;
  }
}
