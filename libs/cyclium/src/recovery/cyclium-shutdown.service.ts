import { Inject, Injectable, type BeforeApplicationShutdown } from '@nestjs/common';
import { ActorHost } from '../actors/actor-host.service.js';
import type { Bus } from '../bus/bus.interface.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import { LeaseRenewer } from '../claims/lease-renewer.service.js';
import { NodeRegistry } from '../identity/node-registry.service.js';
import { Drainer } from './drainer.service.js';
import { Recovery } from './recovery.service.js';

const SIGNALS: NodeJS.Signals[] = ['SIGTERM', 'SIGINT'];
const ignore = () => undefined;

/**
 * The one shutdown hook, so the order is fixed rather than left to hook scheduling: stop triggers
 * and sweeps, drain (which needs the database, hence beforeApplicationShutdown, before TypeORM
 * closes), flush the bus's last events, deregister the node (its queued episodes are then
 * adoptable at once), stop renewing. A second signal while this runs is ignored rather than
 * letting the default action kill the drain halfway.
 */
@Injectable()
export class CycliumShutdown implements BeforeApplicationShutdown {
  private done: Promise<void> | undefined;

  constructor(
    private readonly host: ActorHost,
    private readonly recovery: Recovery,
    private readonly drainer: Drainer,
    private readonly registry: NodeRegistry,
    private readonly renewer: LeaseRenewer,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
  ) {}

  /** True once shutdown began: the node accepts no new work and reports itself unhealthy. */
  get started(): boolean {
    return this.done !== undefined;
  }

  beforeApplicationShutdown(): Promise<void> {
    this.done ??= this.shutdown();
    return this.done;
  }

  private async shutdown(): Promise<void> {
    for (const signal of SIGNALS) process.on(signal, ignore);
    try {
      await this.host.stopTriggers();
      await this.recovery.stop();
      await this.drainer.drain();
      const flushable = this.bus as Bus & { flushPending?: () => Promise<void> };
      await flushable.flushPending?.();
      await this.registry.deregister();
      await this.renewer.stop();
    } finally {
      for (const signal of SIGNALS) process.removeListener(signal, ignore);
    }
  }
}
