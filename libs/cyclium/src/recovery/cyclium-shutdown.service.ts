import { Inject, Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { TriggerSources } from '../triggers/trigger-sources.service.js';
import type { Bus } from '../bus/bus.interface.js';
import { LeaseRenewer } from '../leases/lease-renewer.service.js';
import { TriggerPoller } from '../dispatch/trigger-poller.service.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import { errorMessage } from '../sql/database-errors.js';
import { NodeRegistry } from '../cluster/node-registry.service.js';
import { OutputDelivery } from '../outputs/output-delivery.service.js';
import { OutputRescue } from '../cluster/output-rescue.service.js';
import { Drainer } from './drainer.service.js';
import { WorkflowEngine } from '../workflows/workflow-engine.service.js';
import { RecoverySchedule } from './recovery-schedule.service.js';
import { Recovery } from './recovery.service.js';
import { RetentionSchedule } from '../retention/retention.service.js';

const SIGNALS: NodeJS.Signals[] = ['SIGTERM', 'SIGINT'];
const ignore = () => undefined;

/**
 * The one shutdown hook, so the order is fixed rather than left to hook scheduling: mark the node
 * as going (its boot id cleared), stop triggers, the workflow engine, sweeps, retention and the
 * output rescue, drain the episodes and the output deliveries (which needs the database, hence
 * beforeApplicationShutdown, before TypeORM closes), flush the bus's last events, deregister the
 * node (its queued episodes are then adoptable at once), stop renewing. A second signal while this
 * runs is ignored rather than letting the default action kill the drain halfway.
 */
@Injectable()
export class CycliumShutdown implements BeforeApplicationShutdown {
  private readonly logger = new Logger('Cyclium');
  private done: Promise<void> | undefined;

  constructor(
    private readonly triggers: TriggerSources,
    private readonly slots: ActorSlots,
    private readonly recovery: Recovery,
    private readonly schedule: RecoverySchedule,
    private readonly retention: RetentionSchedule,
    private readonly workflows: WorkflowEngine,
    private readonly drainer: Drainer,
    private readonly registry: NodeRegistry,
    private readonly renewer: LeaseRenewer,
    private readonly poller: TriggerPoller,
    private readonly outputRescue: OutputRescue,
    private readonly outputDelivery: OutputDelivery,
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
    const flushable = this.bus as Bus & { flushPending?: () => Promise<void> };
    try {
      // Each step runs whatever the previous one did: one failing statement must not skip the rest.
      // First, so a process booting under this identity meanwhile sees this one going, not a twin.
      await this.step('mark the node as going', () => this.registry.leaving());
      await this.step('stop the triggers and the workflow engine', async () => {
        this.slots.stopAccepting();
        await this.triggers.stop();
        await this.workflows.stop();
      });
      await this.step(
        'stop recovery sweeps, retention and the trigger request poller',
        async () => {
          this.schedule.stop();
          await this.recovery.stop();
          await this.retention.stop();
          await this.poller.stop();
        },
      );
      await this.step('stop taking outputs', () => this.outputRescue.stop());
      // Side by side: both wait up to episodeShutdownMs, and an episode may be delivering its
      // outputs.
      await Promise.all([
        this.step('drain', () => this.drainer.drain()),
        this.step('drain the output deliveries', () => this.outputDelivery.drain()),
      ]);
      await this.step('flush the bus', async () => flushable.flushPending?.());
      await this.step('deregister the node', () => this.registry.deregister());
      await this.step('stop renewing claims', () => this.renewer.stop());
    } finally {
      for (const signal of SIGNALS) process.removeListener(signal, ignore);
    }
  }

  private async step(what: string, run: () => Promise<unknown>): Promise<void> {
    try {
      await run();
    } catch (error) {
      this.logger.error(`shutdown: could not ${what}: ${errorMessage(error)}; carrying on`);
    }
  }
}
