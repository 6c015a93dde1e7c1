import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import {
  createNoopMeter,
  metrics,
  type BatchObservableCallback,
  type Meter,
  type Observable,
} from '@opentelemetry/api';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import type { Bus } from '../bus/bus.interface.js';
import { busStatusOf } from '../bus/bus-status.interface.js';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { LeaseRenewer } from '../leases/lease-renewer.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CYCLIUM_VERSION } from '../version.js';
import { createInstruments, feedInstruments } from './metrics-instruments.js';

const METER_NAME = '@cyclium/nestjs';

/**
 * True when the host registered a global MeterProvider. Without one the api hands out its no-op
 * meter, whose class this copy of the api can tell apart (the global itself is shared across
 * copies).
 */
export function meterProviderRegistered(): boolean {
  return (
    metrics.getMeterProvider().getMeter(METER_NAME).constructor !== createNoopMeter().constructor
  );
}

/**
 * Feeds OpenTelemetry instruments from this node's telemetry events and memory. With no
 * MeterProvider registered when the module starts (or `metrics: false`) it subscribes to nothing,
 * so every emit site keeps finding no subscriber and stays free.
 */
@Injectable()
export class CycliumMetrics implements OnModuleInit, OnApplicationShutdown {
  private stop: (() => void) | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly runner: EpisodeRunner,
    private readonly renewer: LeaseRenewer,
    private readonly slots: ActorSlots,
    private readonly registry: ActorRegistry,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** True while this node feeds instruments. */
  get active(): boolean {
    return this.stop !== undefined;
  }

  // Before any provider's bootstrap: triggers and recovery start there, and their first events must
  // count.
  onModuleInit(): void {
    if (!this.options.metrics || !meterProviderRegistered()) return;
    const meter = metrics.getMeter(METER_NAME, CYCLIUM_VERSION);
    const unfeed = feedInstruments(createInstruments(meter), () => this.identity.name());
    const ungauge = this.gauges(meter);
    this.stop = () => {
      unfeed();
      ungauge();
    };
  }

  // After the drain, whose interruptions and releases count too.
  onApplicationShutdown(): void {
    this.stop?.();
    this.stop = undefined;
  }

  /**
   * Read from this node's memory at each collection, labelled by node: cluster-wide counts are the
   * status API's.
   */
  private gauges(meter: Meter): () => void {
    const running = meter.createObservableGauge('cyclium.episodes.running', {
      unit: '{episode}',
      description: 'Episodes running on this node now',
    });
    const queued = meter.createObservableGauge('cyclium.episodes.queued', {
      unit: '{episode}',
      description:
        "Episodes waiting in this node's memory for a slot (restarts handed over, bus triggers " +
        'held back)',
    });
    const claims = meter.createObservableGauge('cyclium.claims.live', {
      unit: '{claim}',
      description: 'Work claims this node is renewing now',
    });
    const busLag = meter.createObservableGauge('cyclium.bus.lag', {
      unit: 's',
      description: 'How old the newest wanted event was when this node read it',
    });
    const observe: BatchObservableCallback = (result) => {
      const node = { 'cyclium.node': this.identity.name() };
      const byActor = new Map<string, number>(this.registry.all().map((actor) => [actor.id, 0]));
      for (const run of this.runner.inFlight())
        byActor.set(run.episode.actorId, (byActor.get(run.episode.actorId) ?? 0) + 1);
      for (const [actorId, count] of byActor) {
        const attributes = { ...node, 'cyclium.actor': actorId };
        result.observe(running, count, attributes);
        result.observe(queued, this.slots.waiting(actorId), attributes);
      }
      result.observe(claims, this.renewer.held().length, node);
      const lagMs = busStatusOf(this.bus)?.lagMs;
      const channel = (this.bus as Partial<{ channel: string }>).channel;
      if (lagMs !== undefined && lagMs !== null) {
        result.observe(
          busLag,
          lagMs / 1000,
          channel === undefined ? node : { ...node, 'messaging.destination.name': channel },
        );
      }
    };
    const observables: Observable[] = [running, queued, claims, busLag];
    meter.addBatchObservableCallback(observe, observables);
    return () => meter.removeBatchObservableCallback(observe, observables);
  }
}
