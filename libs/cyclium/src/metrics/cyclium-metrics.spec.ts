import { afterEach, describe, expect, it } from '@jest/globals';
import { metrics } from '@opentelemetry/api';
import {
  MeterProvider,
  MetricReader,
  type HistogramMetricData,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import diagnosticsChannel from 'node:diagnostics_channel';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { channelName, type CycliumEventName } from '../telemetry/telemetry.events.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { CycliumMetrics, meterProviderRegistered } from './cyclium-metrics.service.js';

/**
 * Every event the instruments read: none may have a subscriber while no MeterProvider is
 * registered.
 */
const FED: CycliumEventName[] = [
  'work_claims.acquired',
  'work_claims.steal',
  'work_claims.busy',
  'work_claims.renewed',
  'work_claims.renew_failed',
  'work_claims.completed',
  'work_claims.failed',
  'episode.started',
  'episode.resumed',
  'episode.completed',
  'episode.failed',
  'episode.canceled',
  'episode.aborted',
  'episode.interrupted',
  'episode.retrying',
  'episode.sleeping',
  'episode.waiting',
  'episode.wait_ended',
  'episode.step',
  'episode.triggered',
  'bus.published',
  'bus.read',
  'recovery.sweep',
  'trigger_requests.deferred',
  'trigger_requests.dispatched',
  'trigger_requests.expired',
];

/** What the flow read answers: an unkeyed concurrency limit, and a keyed rate limit. */
const FLOW_BUCKETS = [
  {
    actorId: 'a1',
    expectationId: 'x1',
    bucket: '',
    running: 2,
    waiting: 5,
    rateWindowStarts: null,
  },
  { actorId: 'a2', expectationId: 'x2', bucket: 'b3', running: 1, waiting: 0, rateWindowStarts: 7 },
];

class TestReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

function node(name: string, options: { metrics?: boolean } = {}) {
  const resolved = resolveCycliumOptions({ nodeIdentity: name, ...options });
  const identity = new NodeIdentity(resolved);
  const service = new CycliumMetrics(
    identity,
    { inFlight: () => [{ episode: { actorId: 'a1' } }] } as never,
    { held: () => [{ key: 'k', fence: 1 }] } as never,
    { waiting: () => 2 } as never,
    {
      all: () => [
        { id: 'a1', expectations: new Map() },
        { id: 'a2', expectations: new Map() },
      ],
    } as never,
    { status: () => ({ lagMs: 1500 }), channel: 'cyclium_events' } as never,
    resolved,
    { buckets: () => Promise.resolve(FLOW_BUCKETS) } as never,
  );
  return { service, telemetry: new CycliumTelemetry(identity) };
}

const subscribed = () =>
  FED.filter((event) => diagnosticsChannel.hasSubscribers(channelName(event)));

async function collected(reader: MetricReader): Promise<Map<string, MetricData>> {
  const { resourceMetrics } = await reader.collect();
  return new Map(
    resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .map((metric) => [metric.descriptor.name, metric]),
  );
}

describe('CycliumMetrics', () => {
  afterEach(() => metrics.disable());

  it('subscribes to nothing while no MeterProvider is registered, so every emit stays free', () => {
    const { service } = node('node-m');
    expect(meterProviderRegistered()).toBe(false);
    service.onModuleInit();
    expect(service.active).toBe(false);
    expect(subscribed()).toEqual([]);
  });

  it('subscribes to nothing with metrics: false, even with a MeterProvider', () => {
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new TestReader()] }));
    const { service } = node('node-m', { metrics: false });
    service.onModuleInit();
    expect(subscribed()).toEqual([]);
  });

  it(
    "with a MeterProvider, counts this node's events only and reads gauges from its memory, " +
      'until shutdown',
    async () => {
      const reader = new TestReader();
      metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
      const mine = node('node-m');
      const peer = node('node-p');
      mine.service.onModuleInit();
      expect(subscribed()).toEqual(FED);

      const episode = { episodeId: 'e1', actorId: 'a1', expectationId: 'x1' };
      for (const { telemetry } of [mine, peer]) {
        telemetry.emit('work_claims.acquired', {
          dedupeKey: 'episode:e1',
          fence: 1,
          durationMs: 4,
        });
        telemetry.emit('work_claims.steal', { dedupeKey: 'episode:e2', fence: 2, durationMs: 6 });
        telemetry.emit('episode.started', episode);
        telemetry.emit('episode.step', { actorId: 'a1', expectationId: 'x1', durationMs: 250 });
        telemetry.emit('episode.completed', { ...episode, status: 'done' });
        telemetry.emit('work_claims.renewed', {
          dedupeKey: 'episode:e1',
          fence: 1,
          durationMs: 2,
          lagMs: 500,
        });
      }
      mine.telemetry.emit('episode.failed', { ...episode, episodeId: 'e3', errorClass: 'crash' });
      const wait = { ...episode, episodeId: 'e4', name: 'signal:go', kind: 'signal' as const };
      mine.telemetry.emit('episode.waiting', { ...wait, deadline: null });
      mine.telemetry.emit('episode.wait_ended', { ...wait, outcome: 'received' });
      peer.telemetry.emit('episode.wait_ended', { ...wait, outcome: 'timed_out' });

      const seen = await collected(reader);
      const points = (name: string) =>
        (seen.get(name)?.dataPoints ?? []).map((p) => ({
          attributes: p.attributes,
          value: p.value,
        }));
      expect(points('cyclium.claims')).toEqual([
        { attributes: { 'cyclium.claim.outcome': 'acquired' }, value: 1 },
        { attributes: { 'cyclium.claim.outcome': 'steal' }, value: 1 },
        { attributes: { 'cyclium.claim.outcome': 'renewed' }, value: 1 },
      ]);
      expect(points('cyclium.episodes.ended')).toEqual([
        {
          attributes: {
            'cyclium.actor': 'a1',
            'cyclium.expectation': 'x1',
            'cyclium.episode.status': 'done',
          },
          value: 1,
        },
        {
          attributes: {
            'cyclium.actor': 'a1',
            'cyclium.expectation': 'x1',
            'cyclium.episode.status': 'failed',
            'error.type': 'crash',
          },
          value: 1,
        },
        {
          attributes: {
            'cyclium.actor': 'a1',
            'cyclium.expectation': 'x1',
            'cyclium.episode.status': 'waiting',
          },
          value: 1,
        },
      ]);
      const waitOf = (outcome: string) => ({
        attributes: {
          'cyclium.actor': 'a1',
          'cyclium.expectation': 'x1',
          'cyclium.wait.kind': 'signal',
          'cyclium.wait.outcome': outcome,
        },
        value: 1,
      });
      expect(points('cyclium.episode.waits')).toEqual([waitOf('waiting'), waitOf('received')]);
      const histogram = (name: string) =>
        (seen.get(name) as HistogramMetricData | undefined)?.dataPoints.map((p) => [
          p.value.count,
          p.value.sum,
        ]);
      expect(histogram('cyclium.episode.step.duration')).toEqual([[1, 0.25]]);
      expect(histogram('cyclium.claim.renewal.lag')).toEqual([[1, 0.5]]);
      expect(histogram('cyclium.episode.duration')).toHaveLength(1);
      expect(points('cyclium.episodes.running')).toEqual([
        { attributes: { 'cyclium.node': 'node-m', 'cyclium.actor': 'a1' }, value: 1 },
        { attributes: { 'cyclium.node': 'node-m', 'cyclium.actor': 'a2' }, value: 0 },
      ]);
      expect(points('cyclium.claims.live')).toEqual([
        { attributes: { 'cyclium.node': 'node-m' }, value: 1 },
      ]);
      expect(points('cyclium.bus.lag')).toEqual([
        {
          attributes: { 'cyclium.node': 'node-m', 'messaging.destination.name': 'cyclium_events' },
          value: 1.5,
        },
      ]);
      const flow = (actor: string, expectation: string, bucket: string, value: number) => ({
        attributes: {
          'cyclium.actor': actor,
          'cyclium.expectation': expectation,
          'cyclium.flow.key_bucket': bucket,
        },
        value,
      });
      expect(points('cyclium.flow.running')).toEqual([
        flow('a1', 'x1', '', 2),
        flow('a2', 'x2', 'b3', 1),
      ]);
      expect(points('cyclium.flow.throttled')).toEqual([
        flow('a1', 'x1', '', 5),
        flow('a2', 'x2', 'b3', 0),
      ]);
      expect(points('cyclium.flow.rate_window_starts')).toEqual([flow('a2', 'x2', 'b3', 7)]);
      // No attribute carries an id.
      const values = [...seen.values()].flatMap((metric) =>
        metric.dataPoints.flatMap((p) => Object.values(p.attributes)),
      );
      expect(
        values.filter((value) => typeof value === 'string' && /e\d|episode:/.test(value)),
      ).toEqual([]);

      mine.service.onApplicationShutdown();
      expect(subscribed()).toEqual([]);
    },
  );
});
