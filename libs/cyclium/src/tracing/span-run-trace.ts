import {
  context,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { RunTrace, StepKind, StepTrace } from '../episodes/run-tracer.interface.js';
import { parseTraceContext } from '../primitives/trace-context.js';

/** Attribute names, in the `cyclium.` namespace. */
export const ATTR = {
  actor: 'cyclium.actor',
  expectation: 'cyclium.expectation',
  episodeId: 'cyclium.episode.id',
  attempt: 'cyclium.episode.attempt',
  node: 'cyclium.node',
  resumed: 'cyclium.resumed',
  outcome: 'cyclium.outcome',
  stepName: 'cyclium.step.name',
  stepNo: 'cyclium.step.number',
  stepKind: 'cyclium.step.kind',
  replayed: 'cyclium.step.replayed',
} as const;

/** A run traced by a real tracer: the run's span, and its steps' spans as its children. */
export class SpanRunTrace implements RunTrace {
  private readonly active: Context;

  constructor(
    private readonly tracer: Tracer,
    private readonly span: Span,
    parent: Context,
  ) {
    this.active = trace.setSpan(parent, span);
  }

  within<T>(fn: () => T): T {
    return context.with(this.active, fn);
  }

  step(kind: StepKind, name: string, stepNo: number): StepTrace {
    const span = this.startStep(kind, name, stepNo, false);
    const active = trace.setSpan(this.active, span);
    return {
      within: (fn) => context.with(active, fn),
      end: (error) => {
        if (error !== undefined) {
          span.recordException(error instanceof Error ? error : messageOf(error));
          span.setStatus({ code: SpanStatusCode.ERROR, message: messageOf(error) });
        }
        span.end();
      },
      link: (stored) => {
        const sender = parseTraceContext(stored);
        if (sender) span.addLink({ context: sender });
      },
    };
  }

  replayed(kind: StepKind, name: string, stepNo: number): void {
    this.startStep(kind, name, stepNo, true).end();
  }

  event(name: string, attributes?: Attributes): void {
    this.span.addEvent(name, attributes);
  }

  outcome(outcome: string, error?: string): void {
    this.span.setAttribute(ATTR.outcome, outcome);
    if (error !== undefined) this.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  }

  end(): void {
    this.span.end();
  }

  private startStep(kind: StepKind, name: string, stepNo: number, replayed: boolean): Span {
    return this.tracer.startSpan(
      `${kind} ${name}`,
      {
        attributes: {
          [ATTR.stepName]: name,
          [ATTR.stepNo]: stepNo,
          [ATTR.stepKind]: kind,
          [ATTR.replayed]: replayed,
        },
      },
      this.active,
    );
  }
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return typeof error === 'string' ? error : (JSON.stringify(error) ?? 'undefined');
}
