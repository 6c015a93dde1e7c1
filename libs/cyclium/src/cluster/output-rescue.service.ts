import { Inject, Injectable, Logger } from '@nestjs/common';
import { SpacedTrigger } from '../primitives/spaced-trigger.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { OutageLog } from '../sql/database-errors.js';
import { Mode } from '../dispatch/mode.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { OutputAdapters } from '../outputs/output-adapters.service.js';
import { OutputDelivery } from '../outputs/output-delivery.service.js';
import { OutputStore } from '../outputs/output-store.js';

/** At most this many deliveries run on a node at once from the rescue. */
const BATCH = 16;

/**
 * Delivers what the converging node did not: rows whose lease ran out (their node died or hung
 * inside an adapter), rows due for a retry, rows of types the converging node did not host.
 * It has no timer of its own: the node's registration at boot and every beat after it ask the
 * database whether a row of a type hosted here is due (a read inside a statement they run anyway,
 * so an idle node pays nothing for it), and only then does this take rows, with one conditional
 * UPDATE. A node that is not in `full` mode, or is draining, takes nothing; a node takes only rows
 * of its own scope (its env, its stack or none), as every other read does.
 */
@Injectable()
export class OutputRescue {
  private readonly logger = new Logger('CycliumOutputs');
  private readonly outage = new OutageLog(this.logger, 'output rescue');
  private readonly passes = new SpacedTrigger(() => this.pass(), 0, 1);
  private stopped = false;

  constructor(
    private readonly store: OutputStore,
    private readonly delivery: OutputDelivery,
    private readonly adapters: OutputAdapters,
    private readonly mode: Mode,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** The types this node would take now, for the beat's due check; null when it takes none. */
  wanted(): string[] | null {
    if (this.stopped || !this.delivery.accepting || this.mode.current !== 'full') return null;
    const types = this.adapters.types();
    return types.length > 0 ? types : null;
  }

  /** The beat saw a due row. */
  request(): void {
    this.passes.request();
  }

  /** Takes nothing more (the first step of a shutdown); waits for a take in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.passes.stop();
  }

  private async pass(): Promise<void> {
    const types = this.wanted();
    const room = BATCH - this.delivery.running;
    if (!types || room <= 0) return;
    try {
      const sentAt = performance.now();
      const { stackSlug: stack, env, outputMaxAttempts: attempts } = this.options;
      const [me, leaseMs] = [this.identity.name(), this.delivery.leaseMs];
      const rows = await this.store.take(me, types, room, attempts, leaseMs, { stack, env });
      this.outage.succeeded();
      const taken = rows.filter((row) => row.status === 'pending');
      for (const row of rows) {
        if (row.status === 'failed')
          this.logger.warn(`output ${row.id} (${row.dedupeKey}, ${row.type}) failed: ${row.error}`);
      }
      if (taken.length > 0) {
        this.delivery
          .deliver(taken, sentAt)
          .catch((error: unknown) => this.logger.error(`output delivery: ${String(error)}`));
      }
      // A full page may have left due rows behind: look again once there is room.
      if (rows.length === room) this.passes.request();
    } catch (error) {
      this.outage.failed(error);
    }
  }
}
