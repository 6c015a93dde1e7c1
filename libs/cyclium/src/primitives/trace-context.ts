import {
  context,
  createTraceState,
  isSpanContextValid,
  trace,
  ROOT_CONTEXT,
  TraceFlags,
  type Context,
  type SpanContext,
} from '@opentelemetry/api';

/**
 * The W3C trace context a trigger was made in (`traceparent`, and `tracestate` when there is one),
 * stored with the row it wrote so that the run, on whichever node and however late, continues
 * that trace.
 */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The active span's context in W3C form, or undefined outside any (always, without an
 * OpenTelemetry context manager registered). Read from the span context itself, so it needs no
 * propagator.
 */
export function activeTraceContext(): TraceContext | undefined {
  const span = trace.getSpanContext(context.active());
  if (span === undefined || !isSpanContextValid(span)) return undefined;
  const flags = (span.traceFlags & 0xff).toString(16).padStart(2, '0');
  const traceparent = `00-${span.traceId}-${span.spanId}-${flags}`;
  const tracestate = span.traceState?.serialize();
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/**
 * The context whose (remote) parent span is `stored`, or the root context when there is none or
 * it is not a W3C trace context: a row's odd value must not stop its run.
 */
export function storedParent(stored: unknown): Context {
  const span = parseTraceContext(stored);
  return span ? trace.setSpanContext(ROOT_CONTEXT, span) : ROOT_CONTEXT;
}

/**
 * `stored` (a column or field any writer could have set) as a TraceContext, or undefined when it
 * is not one.
 */
export function asTraceContext(stored: unknown): TraceContext | undefined {
  if (typeof stored !== 'object' || stored === null) return undefined;
  const { traceparent, tracestate } = stored as Partial<Record<keyof TraceContext, unknown>>;
  if (typeof traceparent !== 'string' || !TRACEPARENT.test(traceparent)) return undefined;
  return typeof tracestate === 'string' && tracestate !== ''
    ? { traceparent, tracestate }
    : { traceparent };
}

/** `stored` as a remote span context, or undefined when it is not a valid W3C trace context. */
export function parseTraceContext(stored: unknown): SpanContext | undefined {
  const valid = asTraceContext(stored);
  if (valid === undefined) return undefined;
  const { traceparent, tracestate } = valid;
  const match = TRACEPARENT.exec(traceparent);
  if (!match) return undefined;
  const span: SpanContext = {
    traceId: match[1] as string,
    spanId: match[2] as string,
    traceFlags: parseInt(match[3] as string, 16) & TraceFlags.SAMPLED,
    isRemote: true,
    ...(tracestate === undefined ? {} : { traceState: createTraceState(tracestate) }),
  };
  return isSpanContextValid(span) ? span : undefined;
}
