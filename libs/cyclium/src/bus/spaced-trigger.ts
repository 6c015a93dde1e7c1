/**
 * Runs `action` when asked, but never more often than once per `spacingMs`, and never two at
 * once: asked after a quiet spell, it runs at once; asked again sooner, it runs once more when
 * the spacing has passed, however many times it was asked meanwhile. Idle costs nothing and adds
 * no wait; under load the runs per second are capped, so each run serves more of what happened.
 */
export class SpacedTrigger {
  private running: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private pending = false;
  private lastStart = Number.NEGATIVE_INFINITY;
  private stopped = false;

  constructor(
    private readonly action: () => Promise<void>,
    private readonly spacingMs: number,
  ) {}

  request(): void {
    if (this.stopped) return;
    this.pending = true;
    this.schedule();
  }

  /** Resolves once nothing is pending or running. */
  async idle(): Promise<void> {
    while (this.running || this.timer || (this.pending && !this.stopped)) {
      if (this.running) await this.running;
      else await new Promise((resolve) => setTimeout(resolve, this.spacingMs));
    }
  }

  /** Runs nothing more after the run in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = false;
    await this.running;
  }

  private schedule(): void {
    if (!this.pending || this.running || this.timer || this.stopped) return;
    const wait = this.lastStart + this.spacingMs - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.schedule();
      }, wait);
      this.timer.unref();
      return;
    }
    this.pending = false;
    this.lastStart = performance.now();
    this.running = this.action()
      .catch(() => undefined)
      .finally(() => {
        this.running = undefined;
        this.schedule();
      });
  }
}
