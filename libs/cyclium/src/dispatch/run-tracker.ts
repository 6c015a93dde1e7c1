/**
 * What the drain waits for on one node: the starts under way (an insert, a dequeue, a restart,
 * until it launched its run or gave up) and the runs themselves; and whether the node still
 * starts anything new (not once it drains).
 */
export class RunTracker {
  private readonly starts = new Set<Promise<unknown>>();
  private readonly runs = new Set<Promise<void>>();
  private accepting = true;

  /** False once the node drains: nothing new starts (or is deferred) here. */
  get open(): boolean {
    return this.accepting;
  }

  /** The drain: nothing new starts here from now on. */
  close(): void {
    this.accepting = false;
  }

  /** `start`, counted until it settles. */
  starting<T>(start: Promise<T>): Promise<T> {
    this.starts.add(start);
    const forget = () => this.starts.delete(start);
    start.then(forget, forget);
    return start;
  }

  /** `run`, counted until it settles (it must not reject: the runner settles its own failures). */
  running(run: Promise<void>): void {
    const tracked = run.finally(() => this.runs.delete(tracked));
    this.runs.add(tracked);
  }

  /** Resolves once every start under way has either launched its run or given up. */
  async startsSettled(): Promise<void> {
    while (this.starts.size > 0) await Promise.allSettled([...this.starts]);
  }

  /** Resolves once every run has ended. */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.allSettled([...this.runs]);
  }
}
