import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import { Bus } from '../bus/bus.interface.js';
import { readsLifecycle } from '../bus/lifecycle-reads.interface.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { OutageLog } from '../sql/database-errors.js';

/**
 * Keeps this node's row saying which terminal lifecycle events its handlers read (LifecycleReads),
 * so ends in its stack and env write those events and spare the rest. Declared once the row is
 * written at boot (until then, and whenever the row holds no declaration of this boot, the node
 * counts as reading every type), again as soon as a handler takes a type not yet declared (the
 * handler is owed the ends that look after that declaration commits), and narrowed at the beats
 * after handlers left. Writes are one at a time, and a set already stored is not written again.
 * A bus that cannot tell declares nothing: every end then writes its event.
 */
@Injectable()
export class LifecycleDeclarations implements OnModuleDestroy {
  private readonly logger = new Logger('CycliumNode');
  private readonly outage = new OutageLog(this.logger, 'declaring the lifecycle events read here');
  /** The set last stored for this boot's row, joined; null before that or after a new row. */
  private stored: string | null = null;
  private chain: Promise<void> = Promise.resolve();
  private off: (() => void) | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly database: CycliumDataSource,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
  ) {}

  onModuleDestroy(): void {
    this.off?.();
  }

  /** This node's row was written (anew): declares what its handlers read, then every widening. */
  async registered(): Promise<void> {
    const bus = this.bus;
    if (!readsLifecycle(bus)) return;
    this.stored = null;
    this.off ??= bus.onLifecycleReads(() => this.settled());
    await this.settled();
  }

  /**
   * Resolves once what this node's handlers read now is stored, or storing it failed (logged once
   * per outage; the next beat tries again, and meanwhile ends read the row as it was).
   */
  async settled(): Promise<void> {
    if (!readsLifecycle(this.bus)) return;
    const next = this.chain.then(() => this.write());
    this.chain = next.catch(() => undefined);
    try {
      await next;
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }

  private async write(): Promise<void> {
    const bus = this.bus;
    if (!readsLifecycle(bus)) return;
    const types = bus.lifecycleReads();
    const key = types.join(',');
    if (key === this.stored) return;
    const { rows } = await this.database.sql.query<{ stored: boolean }>(
      `SELECT cyclium_declare_lifecycle_reads($1, $2, $3::text[]) AS stored`,
      [this.identity.name(), this.identity.bootId, types],
    );
    // Not stored: the row is not this boot's yet (or any more); `registered` declares again.
    if (rows[0]?.stored) this.stored = key;
  }
}
