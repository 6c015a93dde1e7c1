export interface Pending<T> {
  readonly item: T;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * Group commit: the first item goes out at once (on the next turn of the event loop, so items
 * added in the same turn share its statement); whatever arrives while a send is in flight waits
 * and leaves together in the next one. There is no fixed wait: a lone publisher pays one round
 * trip, and a busy one pays fewer statements per item as load rises. Sends never overlap, so
 * items leave in the order they were added.
 */
export class GroupCommit<T> {
  private queue: Array<Pending<T>> = [];
  private scheduled = false;
  private inFlight: Promise<void> | undefined;

  /** `send` settles every item of its batch; a throw rejects those it left unsettled. */
  constructor(private readonly send: (batch: Array<Pending<T>>) => Promise<void>) {}

  add(item: T): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves once nothing is queued or in flight. */
  async idle(): Promise<void> {
    while (this.inFlight || this.queue.length > 0) {
      if (this.inFlight) await this.inFlight;
      else await new Promise((resolve) => setImmediate(resolve));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.inFlight || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.inFlight = this.send(batch)
      .catch((error: unknown) => {
        // Settling twice is a no-op, so items already settled keep their own outcome.
        for (const pending of batch) pending.reject(error);
      })
      .finally(() => {
        this.inFlight = undefined;
        this.schedule();
      });
  }
}
