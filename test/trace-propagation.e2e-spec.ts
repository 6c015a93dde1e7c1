import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { context, trace, type Span } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import {
  Actor,
  Bus,
  Episodes,
  Expectation,
  Workflow,
  WorkflowEngine,
  WorkflowStep,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

@Injectable()
@Actor({ id: 'traced', maxConcurrentEpisodes: 8 })
class TracedActor {
  @Expectation({ id: 'on-event', trigger: { event: 'trace_test.placed' } })
  async onEvent(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('handle', () => true);
    return {};
  }

  @Expectation({ id: 'parent', trigger: 'manual' })
  async parent(ep: EpisodeContext): Promise<Convergence> {
    const child = await ep.startChild('traced', 'child', {}, { key: 'c1' });
    await ep.waitForChildren([child]);
    return {};
  }

  @Expectation({ id: 'child', trigger: 'manual' })
  async child(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('work', () => true);
    return {};
  }

  @Expectation({ id: 'approval', trigger: 'manual' })
  async approval(ep: EpisodeContext): Promise<Convergence> {
    const got = await ep.waitForSignal<{ by: string }>('approve');
    return { summary: got.status === 'received' ? got.payload.by : 'timed out' };
  }

  @Expectation({ id: 'collect', trigger: 'manual' })
  async collect(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('collect', () => true);
    return {};
  }
}

@Injectable()
@Workflow({ id: 'traced_flow' })
class TracedFlow {
  @WorkflowStep({ actor: 'traced', expectation: 'collect' })
  only(): Record<string, never> {
    return {};
  }
}

/**
 * Trace context stored with rows and continued by the runs, in one process with the OpenTelemetry
 * SDK and an in-memory exporter: a bus event published in a span (stored on cyclium_events), a
 * child started in a run, a workflow started in a span, and `tracing: false`.
 */
describe('trace context through events, children and workflows', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  let url: string;
  let app: INestApplicationContext;
  let db: ReturnType<typeof pool>;

  beforeAll(async () => {
    provider.register();
    url = await freshDatabase();
    db = pool(url);
    app = await startCycliumApp({
      url,
      cyclium: { bus: 'postgres', workClaims: 'postgres', triggerPollIntervalMs: 200 },
      providers: [TracedActor, TracedFlow],
    });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await db?.end();
    await provider.shutdown();
    trace.disable();
    context.disable();
  });

  /** Runs `fn` inside a fresh root span, ended after it. */
  const inSpan = async <T>(name: string, fn: () => Promise<T>): Promise<{ span: Span; out: T }> => {
    const tracer = trace.getTracer('test');
    return tracer.startActiveSpan(name, async (span) => {
      try {
        return { span, out: await fn() };
      } finally {
        span.end();
      }
    });
  };
  const statusOf = async (id: string) =>
    (await db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id])).rows[0]?.status;
  const runSpans = (name: string) =>
    exporter.getFinishedSpans().filter((s) => s.name === `episode traced.${name}`);

  it('an event published in a span is stored with its context, and the episode it triggers continues that trace', async () => {
    const { span } = await inSpan('publish', () =>
      app.get(Bus).publish('trace_test.placed', { order: 1 }),
    );
    const { rows } = await db.query(
      `SELECT trace_context FROM cyclium_events WHERE type = 'trace_test.placed'`,
    );
    expect(rows[0].trace_context.traceparent).toContain(span.spanContext().traceId);
    await waitFor('the event episode ended', () => runSpans('on-event').length === 1, 20_000, 50);
    const run = runSpans('on-event')[0]!;
    expect(run.spanContext().traceId).toBe(span.spanContext().traceId);
    expect(run.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
  }, 30_000);

  it('a child started in a run is a child of the step that started it, in the same trace', async () => {
    const { span } = await inSpan('request', () =>
      app.get(Episodes).trigger('traced', 'parent', {}),
    );
    const traceId = span.spanContext().traceId;
    await waitFor(
      'the parent resumed and ended',
      () => runSpans('parent').length === 2,
      20_000,
      50,
    );
    const [first, last] = runSpans('parent');
    expect([first!.spanContext().traceId, last!.spanContext().traceId]).toEqual([traceId, traceId]);
    expect(last!.attributes['cyclium.resumed']).toBe(true);
    expect(first!.events.map((e) => e.name)).toContain('cyclium.wait');
    const starter = exporter
      .getFinishedSpans()
      .find(
        (s) => s.name === 'transaction child:c1' && s.attributes['cyclium.step.replayed'] === false,
      );
    expect(starter?.parentSpanContext?.spanId).toBe(first!.spanContext().spanId);
    const child = runSpans('child')[0]!;
    expect(child.spanContext().traceId).toBe(traceId);
    expect(child.parentSpanContext?.spanId).toBe(starter!.spanContext().spanId);
  }, 30_000);

  it('a signal sent in a span: the wait that takes it links to the sender, in the trace of the trigger', async () => {
    const { span: request, out } = await inSpan('request', () =>
      app.get(Episodes).trigger('traced', 'approval', {}),
    );
    const id = 'episode' in out ? out.episode.id : '';
    await waitFor(
      'the episode waiting',
      async () => (await statusOf(id)) === 'waiting',
      20_000,
      50,
    );
    const { span: sender } = await inSpan('approve', () =>
      app.get(Episodes).signal(id, 'approve', { by: 'ada' }),
    );
    const { rows } = await db.query(
      `SELECT trace_context FROM cyclium_signals WHERE episode_id = $1`,
      [id],
    );
    expect(rows[0].trace_context.traceparent).toContain(sender.spanContext().spanId);
    await waitFor(
      'the episode resumed and ended',
      () => runSpans('approval').length === 2,
      20_000,
      50,
    );
    const taken = exporter
      .getFinishedSpans()
      .filter((s) => s.name === 'wait signal:approve' && s.links.length > 0);
    expect(taken).toHaveLength(1);
    expect(taken[0]!.links[0]!.context.spanId).toBe(sender.spanContext().spanId);
    expect(taken[0]!.spanContext().traceId).toBe(request.spanContext().traceId);
    expect(runSpans('approval')[1]!.attributes['cyclium.outcome']).toBe('done');
  }, 30_000);

  it("a workflow started in a span: its step episodes continue the start's trace", async () => {
    const { span } = await inSpan('start', () => app.get(WorkflowEngine).start('traced_flow', {}));
    await waitFor('the step episode ended', () => runSpans('collect').length === 1, 20_000, 50);
    const step = runSpans('collect')[0]!;
    expect(step.spanContext().traceId).toBe(span.spanContext().traceId);
    expect(step.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
  }, 30_000);

  it('with tracing: false a node records no span, and still stores the context for the nodes that do', async () => {
    const quiet = await startCycliumApp({
      url,
      cyclium: {
        bus: 'postgres',
        workClaims: 'postgres',
        tracing: false,
        nodeIdentity: 'quiet-node',
      },
      providers: [TracedActor],
    });
    try {
      exporter.reset();
      const { span, out } = await inSpan('request', () =>
        quiet.get(Episodes).trigger('traced', 'child', {}, { dedupeKey: 'quiet' }),
      );
      const id = 'episode' in out ? out.episode.id : '';
      await waitFor(
        'the quiet episode done',
        async () =>
          (await db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id])).rows[0]
            ?.status === 'done',
        20_000,
        50,
      );
      const { rows } = await db.query(`SELECT trigger_ref FROM cyclium_episodes WHERE id = $1`, [
        id,
      ]);
      expect(rows[0].trigger_ref.traceContext.traceparent).toContain(span.spanContext().traceId);
      expect(exporter.getFinishedSpans().filter((s) => s.name.startsWith('episode '))).toEqual([]);
    } finally {
      await quiet.close();
    }
  }, 30_000);
});
