import { Inject, Injectable, Logger } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage } from '../sql/database-errors.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import { OutputAdapters } from './output-adapters.service.js';
import { DeliveryInterruptedError, DeliveryTimeoutError } from './output-errors.js';
import { OutputStore } from './output-store.js';

/**
 * A lease outlives the local deadline by this much: timers fire late, and clocks run at slightly
 * different rates.
 */
const LEASE_GRACE_MS = 1_000;
/** No retry waits longer than this, however many attempts are allowed. */
const MAX_BACKOFF_MS = 3_600_000;

type Outcome = { ok: true; ref: unknown } | { ok: false; error: unknown };

/**
 * Runs delivery attempts of rows this node holds the lease of, whoever took them (the converging
 * episode or the rescue): the adapter gets the row's stable idempotency key and a signal that
 * aborts at `deliveryTimeoutMs`, counted from before the statement that took the lease was sent, so
 * this node stops before its lease (which runs from the database's later `now()`) runs out. The
 * attempt then ends `delivered`, due again after an exponential backoff, or `failed` past
 * `outputMaxAttempts`. An adapter that ignores its signal is no longer waited for; its late result
 * is dropped.
 */
@Injectable()
export class OutputDelivery {
  private readonly logger = new Logger('CycliumOutputs');
  private readonly inFlight = new Set<{ controller: AbortController; done: Promise<void> }>();
  private draining = false;
  private drained = false;

  constructor(
    private readonly store: OutputStore,
    private readonly adapters: OutputAdapters,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** How long a take leases a row for. */
  get leaseMs(): number {
    return this.options.deliveryTimeoutMs + LEASE_GRACE_MS;
  }

  get running(): number {
    return this.inFlight.size;
  }

  /** False once a drain began: this node takes no more rows. */
  get accepting(): boolean {
    return !this.draining;
  }

  /**
   * Delivers rows leased to this node by a statement sent at `sentAt` (performance.now()); never
   * rejects.
   */
  async deliver(outputs: readonly CycliumOutput[], sentAt: number): Promise<void> {
    if (this.drained) {
      // Leased by an end that committed after the drain finished: hand them back at once.
      await this.store
        .release(
          this.identity.name(),
          outputs.map((o) => o.id),
        )
        .catch((error: unknown) => this.recordError('release', error));
      return;
    }
    await Promise.all(outputs.map((output) => this.track(output, sentAt)));
  }

  /**
   * Gives the attempts in flight until `episodeShutdownMs`, aborts the rest, and releases every row
   * this node still holds, so a peer takes them at its next look instead of after the lease.
   */
  async drain(): Promise<void> {
    this.draining = true;
    const settled = Promise.all([...this.inFlight].map((a) => a.done));
    let timer: NodeJS.Timeout | undefined;
    const window = new Promise<void>(
      (resolve) => (timer = setTimeout(resolve, this.options.episodeShutdownMs)),
    );
    await Promise.race([settled, window]);
    clearTimeout(timer);
    const cut = [...this.inFlight];
    for (const attempt of cut) attempt.controller.abort(new DeliveryInterruptedError());
    await Promise.all(cut.map((a) => a.done));
    this.drained = true;
    const released = await this.store.release(this.identity.name());
    if (cut.length > 0 || released > 0) {
      this.logger.warn(
        `drain: ${cut.length} output delivery(ies) cut short after ` +
          `${this.options.episodeShutdownMs} ms; ${released} output(s) released for other nodes`,
      );
    }
  }

  private track(output: CycliumOutput, sentAt: number): Promise<void> {
    const controller = new AbortController();
    const entry = { controller, done: Promise.resolve() };
    entry.done = this.attempt(output, sentAt, controller)
      .catch((error: unknown) => this.recordError(`end of output ${output.id}`, error))
      .finally(() => this.inFlight.delete(entry));
    this.inFlight.add(entry);
    return entry.done;
  }

  private async attempt(
    output: CycliumOutput,
    sentAt: number,
    controller: AbortController,
  ): Promise<void> {
    const me = this.identity.name();
    const adapter = this.adapters.get(output.type);
    if (!adapter) {
      // Taken only for hosted types; if that changed, someone else must have it.
      await this.store.release(me, [output.id]);
      return;
    }
    const timeoutMs = this.options.deliveryTimeoutMs;
    const timer = setTimeout(
      () => controller.abort(new DeliveryTimeoutError(timeoutMs)),
      Math.max(0, sentAt + timeoutMs - performance.now()),
    );
    let outcome: Outcome;
    try {
      const aborted = new Promise<Outcome>((resolve) => {
        const onAbort = () => resolve({ ok: false, error: controller.signal.reason });
        if (controller.signal.aborted) onAbort();
        else controller.signal.addEventListener('abort', onAbort, { once: true });
      });
      const delivered = Promise.resolve()
        .then(() =>
          adapter.deliver(output, {
            idempotencyKey: output.dedupeKey,
            signal: controller.signal,
            attempt: output.attempts,
          }),
        )
        .then(
          (ref): Outcome => ({ ok: true, ref }),
          (error: unknown): Outcome => ({ ok: false, error }),
        );
      outcome = await Promise.race([delivered, aborted]);
    } finally {
      clearTimeout(timer);
    }
    if (outcome.ok) {
      if (!(await this.store.delivered(output.id, output.attempts, outcome.ref))) {
        this.logger.warn(
          `output ${output.id} (${output.dedupeKey}) was delivered, but another node had taken ` +
            `it meanwhile: it may be delivered again`,
        );
      }
      return;
    }
    // The drain releases the row; the attempt is not the adapter's failure.
    if (outcome.error instanceof DeliveryInterruptedError) return;
    await this.failed(output, errorMessage(outcome.error));
  }

  private async failed(output: CycliumOutput, reason: string): Promise<void> {
    const { outputMaxAttempts, outputRetryBaseMs } = this.options;
    const last = output.attempts >= outputMaxAttempts;
    const delayMs = last
      ? null
      : Math.min(MAX_BACKOFF_MS, outputRetryBaseMs * 2 ** (output.attempts - 1));
    const recorded = await this.store.failed(
      output.id,
      output.attempts,
      this.identity.name(),
      reason,
      delayMs,
    );
    if (!recorded) return;
    if (last) {
      this.logger.warn(
        `output ${output.id} (${output.dedupeKey}, ${output.type}) failed after ` +
          `${output.attempts} attempt(s): ${reason}`,
      );
    } else {
      this.logger.debug(
        `output ${output.id} (${output.dedupeKey}) attempt ${output.attempts} failed, retrying ` +
          `in ${delayMs} ms: ${reason}`,
      );
    }
  }

  private recordError(what: string, error: unknown): void {
    // The row keeps its lease until it runs out; then any node hosting the type takes it again.
    this.logger.error(
      `could not record the ${what}: ${errorMessage(error)}; the lease will run out and the ` +
        `output be retried`,
    );
  }
}
