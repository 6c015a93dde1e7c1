import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import {
  ProxyTracerProvider,
  SpanKind,
  trace,
  type Attributes,
  type Tracer,
} from '@opentelemetry/api';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { onCyclium } from '../telemetry/on-cyclium.js';
import type { CycliumEventMap, EpisodeEvent } from '../telemetry/telemetry.events.js';
import { CYCLIUM_VERSION } from '../version.js';
import {
  NOOP_RUN_TRACE,
  type RunStart,
  type RunTrace,
  type RunTracer,
} from '../episodes/run-tracer.interface.js';
import { storedParent } from '../primitives/trace-context.js';
import { ATTR, SpanRunTrace } from './span-run-trace.js';

const TRACER_NAME = '@cyclium/nestjs';

/**
 * True when the host registered a global TracerProvider. Without one the api's proxy delegates to
 * its no-op provider, whose class a fresh proxy shows (the global itself is shared across copies
 * of the api).
 */
export function tracerProviderRegistered(): boolean {
  const provider = trace.getTracerProvider();
  const delegate = provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider;
  return delegate.constructor !== new ProxyTracerProvider().getDelegate().constructor;
}

/**
 * A span per episode run on this node, continuing the trace its trigger was made in (the row's
 * stored W3C context is the span's parent, on any node and after any wait, resume or recovery),
 * with a child span per step and span events for what the run met: a retry with its backoff, a
 * sleep, a wait, a takeover, a drain. With no TracerProvider registered when the module starts (or
 * `tracing: false`) runs get the no-op trace and nothing subscribes to the telemetry events this
 * follows, so their emit sites stay free.
 */
@Injectable()
export class EpisodeTraces implements RunTracer, OnModuleInit, OnApplicationShutdown {
  private tracer: Tracer | undefined;
  private readonly runs = new Map<string, RunTrace>();
  private unfollow: (() => void) | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onModuleInit(): void {
    if (!this.options.tracing || !tracerProviderRegistered()) return;
    this.tracer = trace.getTracer(TRACER_NAME, CYCLIUM_VERSION);
    this.unfollow = this.follow();
  }

  onApplicationShutdown(): void {
    this.unfollow?.();
    this.unfollow = undefined;
  }

  start(episode: EpisodeRow, how: RunStart): RunTrace {
    if (!this.tracer) return NOOP_RUN_TRACE;
    const trigger = episode.triggerRef as unknown as EpisodeTrigger;
    const parent = storedParent(trigger.traceContext);
    const span = this.tracer.startSpan(
      `episode ${episode.actorId}.${episode.expectationId}`,
      {
        kind: SpanKind.CONSUMER,
        attributes: {
          [ATTR.actor]: episode.actorId,
          [ATTR.expectation]: episode.expectationId,
          [ATTR.episodeId]: episode.id,
          [ATTR.attempt]: episode.attempts,
          [ATTR.node]: this.identity.name(),
          [ATTR.resumed]: how.resumed,
        },
      },
      parent,
    );
    const run = new SpanRunTrace(this.tracer, span, parent);
    if (how.takenOver) run.event('cyclium.takeover');
    this.runs.set(episode.id, run);
    return run;
  }

  finish(episodeId: string, run: RunTrace): void {
    if (run === NOOP_RUN_TRACE) return;
    if (this.runs.get(episodeId) === run) this.runs.delete(episodeId);
    run.end();
  }

  /** The telemetry events of this node's runs, as span events and outcomes. */
  private follow(): () => void {
    const on = <E extends keyof CycliumEventMap>(
      event: E,
      apply: (run: RunTrace, metadata: CycliumEventMap[E]) => void,
    ) =>
      onCyclium(event, (metadata) => {
        const episode = metadata as unknown as EpisodeEvent;
        if (episode.ownerNode !== this.identity.name()) return;
        const run = this.runs.get(episode.episodeId);
        if (run) apply(run, metadata);
      });
    const stops = [
      on('episode.completed', (run, m) =>
        run.outcome(typeof m.status === 'string' ? m.status : 'done'),
      ),
      on('episode.failed', (run, m) =>
        run.outcome('failed', typeof m.errorClass === 'string' ? m.errorClass : 'failed'),
      ),
      on('episode.canceled', (run) => run.outcome('canceled')),
      on('episode.aborted', (run, m) => {
        run.event('cyclium.aborted', attributes({ reason: m.reason }));
        run.outcome('aborted');
      }),
      on('episode.interrupted', (run) => {
        run.event('cyclium.drain');
        run.outcome('interrupted');
      }),
      on('episode.retrying', (run, m) => {
        run.event(
          'cyclium.retry_scheduled',
          attributes({ attempt: m.attempt, backoff_ms: m.delayMs, error_class: m.errorClass }),
        );
        run.outcome('retrying');
      }),
      on('episode.sleeping', (run, m) => {
        run.event('cyclium.sleep', attributes({ name: m.name, delay_ms: m.delayMs }));
        run.outcome('sleeping');
      }),
      on('episode.waiting', (run, m) => {
        run.event(
          'cyclium.wait',
          attributes({ name: m.name, kind: m.kind, deadline: m.deadline ?? undefined }),
        );
        run.outcome('waiting');
      }),
      on('episode.wait_ended', (run, m) =>
        run.event(
          'cyclium.wait_ended',
          attributes({ name: m.name, kind: m.kind, outcome: m.outcome }),
        ),
      ),
    ];
    return () => {
      for (const stop of stops) stop();
    };
  }
}

/** `cyclium.`-prefixed span event attributes, leaving out the undefined ones. */
function attributes(values: Record<string, unknown>): Attributes {
  const out: Attributes = {};
  for (const [key, value] of Object.entries(values)) {
    if (typeof value === 'string' || typeof value === 'number') out[`cyclium.${key}`] = value;
  }
  return out;
}
