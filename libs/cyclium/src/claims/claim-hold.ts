import { ClaimLostError, type ClaimLossReason } from './claim-lost.error.js';

/**
 * A live claim as its holder sees it: registered with the node's renewer, it aborts `signal` when
 * a renewal comes back without it, or when no renewal has succeeded by the local deadline. The
 * deadline runs on the monotonic clock from the moment the last successful renewal (or the
 * acquire) was *sent*, so it always falls at or before the lease's end in the database.
 */
export class ClaimHold {
  private readonly controller = new AbortController();
  private deadline: number;
  private released = false;

  constructor(
    readonly key: string,
    /** `null` for a passthrough hold (claims off): it is never lost. */
    readonly fence: number | null,
    private readonly leaseMs: number,
    sentAt: number,
    private readonly onRelease: (hold: ClaimHold) => void = () => undefined,
  ) {
    this.deadline = fence === null ? Number.POSITIVE_INFINITY : sentAt + leaseMs;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /**
   * Lost by signal, released, or past the local deadline even if the renewer has not noticed yet.
   */
  get lost(): boolean {
    if (this.released) return true;
    if (!this.controller.signal.aborted && performance.now() > this.deadline)
      this.markLost('deadline');
    return this.controller.signal.aborted;
  }

  /** Throws ClaimLostError when the claim is lost; call it before every step. */
  check(): void {
    if (!this.lost) return;
    throw this.released && !this.controller.signal.aborted
      ? new ClaimLostError(this.key, this.fence, 'released')
      : this.controller.signal.reason;
  }

  /** The renewer extended the lease: the local deadline moves to `sentAt` plus the lease. */
  renewed(sentAt: number): void {
    if (!this.controller.signal.aborted)
      this.deadline = Math.max(this.deadline, sentAt + this.leaseMs);
  }

  /** Aborts `signal` with a ClaimLostError; nothing once lost or released. */
  markLost(reason: ClaimLossReason): void {
    if (this.controller.signal.aborted || this.released) return;
    this.controller.abort(new ClaimLostError(this.key, this.fence, reason));
    this.onRelease(this);
  }

  /**
   * Stops renewing; the holder is done with the claim (completed, failed or handed back). The
   * signal is left as it is: a holder that is done has nothing left to abort, and the success path
   * of every episode builds no error.
   */
  release(): void {
    if (this.released) return;
    this.released = true;
    if (!this.controller.signal.aborted) this.onRelease(this);
  }

  /**
   * Stops renewing without calling the claim lost: the holder is about to give the lease up
   * itself (a drain), so the renewer must not report the missing renewal as `renew_failed`. The
   * local deadline still applies.
   */
  stopRenewing(): void {
    this.onRelease(this);
  }

  get localDeadline(): number {
    return this.deadline;
  }
}
