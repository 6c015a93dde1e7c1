/**
 * At most `max` items held at once (queued or in a send not yet finished); `refuse` makes the error
 * the next one gets.
 */
export interface GroupCommitBound<T> {
  readonly max: number;
  readonly refuse: (item: T) => Error;
}

export interface Pending<T> {
  readonly item: T;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * Group commit: the first item goes out at once (on the next turn of the event loop, so items
 * added in the same turn share its statement); whatever arrives while a send is in flight waits
 * and leaves together in the next one. There is no fixed wait: a lone publisher pays one round
 * trip, and a busy one pays fewer statements per item as load rises. With `maxInFlight` 1 (the
 * default) sends never overlap, so items leave in the order they were added; a higher limit lets
 * that many sends overlap (items that need no order, on a database with cores to run them), and
 * items wait only while every one of them is busy. With a `bound`, an item that would make more
 * than `max` held in memory is refused at once, so a slow database meets backpressure instead of a
 * queue that grows without end.
 */
export class GroupCommit<T> {
  private queue: Array<Pending<T>> = [];
  private scheduled = false;
  private readonly inFlight = new Set<Promise<void>>();
  private sendingItems = 0;

  /** `send` settles every item of its batch; a throw rejects those it left unsettled. */
  constructor(
    private readonly send: (batch: Array<Pending<T>>) => Promise<void>,
    private readonly maxInFlight = 1,
    private readonly bound?: GroupCommitBound<T>,
  ) {}

  /** Items queued or in a send that has not finished. */
  get held(): number {
    return this.queue.length + this.sendingItems;
  }

  add(item: T): Promise<void> {
    if (this.bound && this.held >= this.bound.max) return Promise.reject(this.bound.refuse(item));
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /** Removes and returns the items still waiting for a send (none of them has been sent). */
  takeQueued(): Array<Pending<T>> {
    const queued = this.queue;
    this.queue = [];
    return queued;
  }

  /** Resolves once nothing is queued or in flight. */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0 || this.queue.length > 0) {
      if (this.inFlight.size > 0) await Promise.all(this.inFlight);
      else await new Promise((resolve) => setImmediate(resolve));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight.size >= this.maxInFlight || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.inFlight.size >= this.maxInFlight || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.sendingItems += batch.length;
    const sending: Promise<void> = this.send(batch)
      .catch((error: unknown) => {
        // Settling twice is a no-op, so items already settled keep their own outcome.
        for (const pending of batch) pending.reject(error);
      })
      .finally(() => {
        this.sendingItems -= batch.length;
        this.inFlight.delete(sending);
        this.schedule();
      });
    this.inFlight.add(sending);
  }
}
