/**
 * Runs `action` when asked, never two at once, and at most one run per `spacingMs` on average
 * once it is busy: a token bucket of `burst` runs. Asked while idle or lightly used, it runs at
 * once (a lone event pays no wait); asked faster than the bucket refills, it runs once more when
 * a token is back, however many times it was asked meanwhile, so each run serves more of what
 * happened as load rises.
 */
export class SpacedTrigger {
  private running: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private pending = false;
  private stopped = false;
  private tokens: number;
  private refilledAt = performance.now();

  constructor(
    private readonly action: () => Promise<void>,
    /** A function is read again at every run, so the spacing can follow the cluster's size. */
    private readonly spacing: number | (() => number),
    private readonly burst = 4,
  ) {
    this.tokens = burst;
  }

  request(): void {
    if (this.stopped) return;
    this.pending = true;
    this.schedule();
  }

  /** Resolves once nothing is pending or running. */
  async idle(): Promise<void> {
    while (this.running || this.timer || (this.pending && !this.stopped)) {
      if (this.running) await this.running;
      else await new Promise((resolve) => setTimeout(resolve, Math.max(1, this.spacingMs)));
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

  private get spacingMs(): number {
    return typeof this.spacing === 'function' ? this.spacing() : this.spacing;
  }

  private refill(): void {
    const now = performance.now();
    const spacingMs = this.spacingMs;
    if (spacingMs > 0)
      this.tokens = Math.min(this.burst, this.tokens + (now - this.refilledAt) / spacingMs);
    else this.tokens = this.burst;
    this.refilledAt = now;
  }

  private schedule(): void {
    if (!this.pending || this.running || this.timer || this.stopped) return;
    this.refill();
    if (this.tokens < 1) {
      this.timer = setTimeout(
        () => {
          this.timer = undefined;
          this.schedule();
        },
        (1 - this.tokens) * this.spacingMs,
      );
      this.timer.unref();
      return;
    }
    this.tokens -= 1;
    this.pending = false;
    this.running = this.action()
      .catch(() => undefined)
      .finally(() => {
        this.running = undefined;
        this.schedule();
      });
  }
}
