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
  /**
   * The earliest due time of a request written here, and when the last was noted: noted before
   * its transaction commits, it is kept until a poll sent once it is due and an interval after
   * the note (by then the write has committed, so that poll read it: its due time is the poll's
   * to keep). A poll sent in between may not have seen the row.
   */
  private written: { dueAt: number; notedAt: number } | undefined;

  constructor(
    /** The longest an idle poller goes without polling; not above the interval: never quiet. */
    private readonly idleMs: number,
    private readonly intervalMs: number,
  ) {}

  /** Whether an interval tick at `now` polls. */
  ticks(now = performance.now()): boolean {
    return now >= this.quietUntil || (this.written !== undefined && now >= this.written.dueAt);
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
    const written = this.written;
    if (written && sentAt >= Math.max(written.dueAt, written.notedAt + this.intervalMs))
      this.written = undefined;
  }

  /** A request written here falls due in `ms`: from then on ticks poll until one has read it. */
  dueIn(ms: number, now = performance.now()): void {
    this.written = {
      dueAt: Math.min(this.written?.dueAt ?? Number.POSITIVE_INFINITY, now + ms),
      notedAt: now,
    };
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
