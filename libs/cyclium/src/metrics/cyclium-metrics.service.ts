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
import { FlowStatusReader } from '../episodes/flow-status.js';
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
    private readonly flowStatus: FlowStatusReader,
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
    const unflow = this.flowGauges(meter);
    this.stop = () => {
      unfeed();
      ungauge();
      unflow();
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

  /**
   * Flow control of the limited expectations this node hosts, read from the database at each
   * collection (one statement, shared by collections within a second; none without a limited
   * expectation): the same cluster-wide numbers from every node of the env, so take the max across
   * nodes, not the sum. Keys are never labels: an expectation without a key function reports its
   * one partition as '', a keyed one the sums of FLOW_BUCKETS hash buckets (b0 to b15), each at 0
   * when empty, so the label set is fixed. A failed read observes nothing.
   */
  private flowGauges(meter: Meter): () => void {
    const running = meter.createObservableGauge('cyclium.flow.running', {
      unit: '{episode}',
      description: 'Episodes of a limited expectation running across the env, by key bucket',
    });
    const throttled = meter.createObservableGauge('cyclium.flow.throttled', {
      unit: '{episode}',
      description: 'Episodes of a limited expectation waiting throttled, by key bucket',
    });
    const rateStarts = meter.createObservableGauge('cyclium.flow.rate_window_starts', {
      unit: '{episode}',
      description: 'Starts in the current rate window of a rate-limited expectation, by key bucket',
    });
    const observe: BatchObservableCallback = async (result) => {
      const expectations = this.registry.all().flatMap((actor) => [...actor.expectations.values()]);
      const buckets = await this.flowStatus.buckets(expectations).catch(() => []);
      for (const b of buckets) {
        const attributes = {
          'cyclium.actor': b.actorId,
          'cyclium.expectation': b.expectationId,
          'cyclium.flow.key_bucket': b.bucket,
        };
        if (b.running !== null) result.observe(running, b.running, attributes);
        if (b.waiting !== null) result.observe(throttled, b.waiting, attributes);
        if (b.rateWindowStarts !== null) result.observe(rateStarts, b.rateWindowStarts, attributes);
      }
    };
    const observables: Observable[] = [running, throttled, rateStarts];
    meter.addBatchObservableCallback(observe, observables);
    return () => meter.removeBatchObservableCallback(observe, observables);
  }
}
