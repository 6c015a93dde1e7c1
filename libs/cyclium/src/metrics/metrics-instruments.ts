import type { Counter, Histogram, Meter, MetricAttributes } from '@opentelemetry/api';
import { onCyclium } from '../telemetry/on-cyclium.js';
import type {
  CycliumEventMap,
  CycliumEventName,
  EpisodeEvent,
  WorkClaimEvent,
} from '../telemetry/telemetry.events.js';

/**
 * Seconds, from a millisecond to a few minutes: the api's default buckets are milliseconds' and
 * would put every episode in the last one.
 */
const SECONDS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
];

/**
 * An episode whose run started here, kept until its end so the end can say how long it ran; a run
 * that vanishes without an end must not grow this forever.
 */
const MAX_OPEN_RUNS = 10_000;

export interface CycliumCounters {
  claims: Counter;
  episodesStarted: Counter;
  episodesEnded: Counter;
  recoveries: Counter;
  triggerRequests: Counter;
  busPublished: Counter;
  busRead: Counter;
  waits: Counter;
}

export interface CycliumHistograms {
  episodeDuration: Histogram;
  stepDuration: Histogram;
  acquireDuration: Histogram;
  renewalLag: Histogram;
  triggerLatency: Histogram;
}

export function createInstruments(meter: Meter): CycliumCounters & CycliumHistograms {
  const seconds = (name: string, description: string) =>
    meter.createHistogram(name, {
      unit: 's',
      description,
      advice: { explicitBucketBoundaries: SECONDS },
    });
  return {
    claims: meter.createCounter('cyclium.claims', {
      unit: '{claim}',
      description: "What this node's work-claim calls came to, by cyclium.claim.outcome",
    }),
    episodesStarted: meter.createCounter('cyclium.episodes.started', {
      unit: '{episode}',
      description: 'Runs this node began (cyclium.episode.resumed: a restart)',
    }),
    episodesEnded: meter.createCounter('cyclium.episodes.ended', {
      unit: '{episode}',
      description: 'Runs this node ended, by cyclium.episode.status',
    }),
    recoveries: meter.createCounter('cyclium.recoveries', {
      unit: '{episode}',
      description: "Orphans this node's recovery sweeps looked at, by cyclium.recovery.outcome",
    }),
    triggerRequests: meter.createCounter('cyclium.trigger_requests', {
      unit: '{request}',
      description: 'Trigger requests this node deferred, dispatched or expired',
    }),
    busPublished: meter.createCounter('cyclium.bus.published', {
      unit: '{event}',
      description: 'Events this node stored on the bus',
    }),
    busRead: meter.createCounter('cyclium.bus.read', {
      unit: '{event}',
      description: 'Events this node read from the bus',
    }),
    waits: meter.createCounter('cyclium.episode.waits', {
      unit: '{wait}',
      description:
        'Waits of runs on this node, by cyclium.wait.kind (signal, event, children) and ' +
        'cyclium.wait.outcome (waiting: the run gave its slot up; received, done, timed_out)',
    }),
    episodeDuration: seconds(
      'cyclium.episode.duration',
      'From the start of a run on this node to its end',
    ),
    stepDuration: seconds('cyclium.episode.step.duration', "A step function's time, as journaled"),
    acquireDuration: seconds(
      'cyclium.claim.acquire.duration',
      'From sending an acquire to its answer (inside the begin statement on the fast path)',
    ),
    renewalLag: seconds(
      'cyclium.claim.renewal.lag',
      'How late a renewal was sent against its schedule, a third of the lease after the previous ' +
        'one',
    ),
    triggerLatency: seconds(
      'cyclium.episode.trigger.latency',
      "From a bus event's publishedAt to the begin of the episode it triggered here",
    ),
  };
}

const ENDED: Partial<Record<CycliumEventName, string>> = {
  'episode.failed': 'failed',
  'episode.canceled': 'canceled',
  'episode.aborted': 'aborted',
  'episode.interrupted': 'interrupted',
  // A run that failed with attempts left ended as a run; the episode waits for its next one.
  'episode.retrying': 'retrying',
  'episode.sleeping': 'sleeping',
  'episode.waiting': 'waiting',
};

const CLAIM_OUTCOMES = [
  'acquired',
  'steal',
  'busy',
  'renewed',
  'renew_failed',
  'completed',
  'failed',
] as const;

/**
 * Feeds the counters and histograms from this node's telemetry events (`own()` names it: other
 * Cyclium nodes in the same process publish on the same channels). Returns the unsubscribe.
 */
export function feedInstruments(
  instruments: CycliumCounters & CycliumHistograms,
  own: () => string,
): () => void {
  const offs: Array<() => void> = [];
  const on = <E extends CycliumEventName>(
    event: E,
    handler: (metadata: CycliumEventMap[E]) => void,
  ) => offs.push(onCyclium(event, (metadata) => metadata.ownerNode === own() && handler(metadata)));
  const runs = new Map<string, number>();

  for (const outcome of CLAIM_OUTCOMES) {
    const attributes = { 'cyclium.claim.outcome': outcome };
    on(`work_claims.${outcome}`, (event: WorkClaimEvent) => {
      instruments.claims.add(1, attributes);
      if (outcome === 'acquired' || outcome === 'steal' || outcome === 'busy')
        instruments.acquireDuration.record(event.durationMs / 1000, attributes);
      if (outcome === 'renewed' && event.lagMs !== undefined)
        instruments.renewalLag.record(event.lagMs / 1000);
    });
  }

  const started = (resumed: boolean) => (event: EpisodeEvent) => {
    instruments.episodesStarted.add(1, {
      ...episodeAttributes(event),
      'cyclium.episode.resumed': resumed,
    });
    if (runs.size >= MAX_OPEN_RUNS) runs.delete(runs.keys().next().value as string);
    runs.set(event.episodeId, performance.now());
  };
  on('episode.started', started(false));
  on('episode.resumed', started(true));
  const ended = (status: string, event: EpisodeEvent) => {
    const attributes: MetricAttributes = {
      ...episodeAttributes(event),
      'cyclium.episode.status': status,
    };
    if (status === 'failed' && typeof event.errorClass === 'string')
      attributes['error.type'] = event.errorClass;
    instruments.episodesEnded.add(1, attributes);
    const since = runs.get(event.episodeId);
    if (since === undefined) return;
    runs.delete(event.episodeId);
    instruments.episodeDuration.record((performance.now() - since) / 1000, attributes);
  };
  on('episode.completed', (event) =>
    ended(typeof event.status === 'string' ? event.status : 'done', event),
  );
  for (const [name, status] of Object.entries(ENDED))
    on(name as 'episode.failed', (event) => ended(status, event));

  const wait = (event: EpisodeEvent & { kind: string }, outcome: string) =>
    instruments.waits.add(1, {
      ...episodeAttributes(event),
      'cyclium.wait.kind': event.kind,
      'cyclium.wait.outcome': outcome,
    });
  on('episode.waiting', (event) => wait(event, 'waiting'));
  on('episode.wait_ended', (event) => wait(event, event.outcome));

  on('episode.step', (event) =>
    instruments.stepDuration.record(event.durationMs / 1000, {
      'cyclium.actor': event.actorId,
      'cyclium.expectation': event.expectationId,
    }),
  );
  on('episode.triggered', (event) =>
    instruments.triggerLatency.record(Math.max(0, event.latencyMs) / 1000, {
      'cyclium.actor': event.actorId,
      'cyclium.expectation': event.expectationId,
      'cyclium.event.type': event.eventType,
    }),
  );

  on('recovery.sweep', (sweep) => {
    const add = (count: number, outcome: string, reason?: string) => {
      if (count > 0)
        instruments.recoveries.add(
          count,
          reason
            ? { 'cyclium.recovery.outcome': outcome, 'cyclium.recovery.skip_reason': reason }
            : { 'cyclium.recovery.outcome': outcome },
        );
    };
    add(sweep.restarted, 'restarted');
    add(sweep.deferred, 'deferred');
    add(sweep.failed, 'failed');
    add(sweep.notHosted, 'not_hosted');
    for (const [reason, count] of Object.entries(sweep.skippedFor))
      add(count ?? 0, 'skipped', reason);
  });

  const request = (outcome: string) => ({ 'cyclium.trigger_request.outcome': outcome });
  on('trigger_requests.deferred', () => instruments.triggerRequests.add(1, request('deferred')));
  on('trigger_requests.dispatched', () =>
    instruments.triggerRequests.add(1, request('dispatched')),
  );
  on('trigger_requests.expired', (event) =>
    instruments.triggerRequests.add(event.count, request('expired')),
  );

  const bus = (channel: string) => ({
    'messaging.system': 'postgresql',
    'messaging.destination.name': channel,
  });
  on('bus.published', (event) => instruments.busPublished.add(event.count, bus(event.channel)));
  on('bus.read', (event) => instruments.busRead.add(event.count, bus(event.channel)));

  return () => {
    for (const off of offs.splice(0)) off();
    runs.clear();
  };
}

function episodeAttributes(event: EpisodeEvent): MetricAttributes {
  return { 'cyclium.actor': event.actorId, 'cyclium.expectation': event.expectationId };
}
