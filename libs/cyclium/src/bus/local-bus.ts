import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { InvalidBusEventError } from './bus-errors.js';
import { assertEventBounds } from './event-bounds.js';
import type { DispatchSignals } from './dispatch-signals.interface.js';
import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import { activeTraceContext } from '../primitives/trace-context.js';

interface Subscription {
  readonly handler: BusHandler;
  active: boolean;
}

/**
 * The event every node will see, minted once on the publishing node (rule 2: a receiver that
 * minted its own id would compute its own dedupe key). `'*'` is refused because it is the
 * wildcard: its subscribers would get the event twice. Ids and types are bounded (event-bounds.ts).
 */
export function mintBusEvent<P>(
  type: string,
  payload: P,
  options: PublishOptions = {},
): BusEvent<P> {
  if (typeof type !== 'string' || type === '' || type === '*') {
    throw new InvalidBusEventError(
      `bus: cannot publish an event of type ${JSON.stringify(type)}; give it a concrete, ` +
        `non-empty type`,
      'type',
    );
  }
  if (
    options.eventId !== undefined &&
    (typeof options.eventId !== 'string' || options.eventId === '')
  ) {
    throw new InvalidBusEventError(
      'bus: eventId, when given, must be a non-empty string',
      'eventId',
    );
  }
  const eventId = options.eventId ?? randomUUID();
  assertEventBounds(type, eventId);
  const traceContext = activeTraceContext();
  const event = { type, eventId, payload, publishedAt: new Date().toISOString() };
  return traceContext === undefined ? event : { ...event, traceContext };
}

/**
 * Events for this process only: tests, single-node hosts, and the fan-out half of PostgresBus.
 * Handlers run on a later macrotask, never inside `publish`, so a publisher holding a transaction
 * or a lock never runs subscriber code under it, and a handler that publishes cannot recurse.
 * Payloads are handed over by reference (no JSON round trip, unlike PostgresBus).
 */
export class LocalBus extends Bus implements DispatchSignals {
  private readonly logger = new Logger('CycliumBus');
  private readonly signalHandlers = new Set<(tokens: readonly string[]) => void>();
  private readonly subscriptions = new Map<string, Set<Subscription>>();
  private readonly queue: BusEvent[] = [];
  private scheduled = false;

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    let event: BusEvent<P>;
    try {
      event = mintBusEvent(type, payload, options);
    } catch (error) {
      return Promise.reject(error);
    }
    this.deliver(event);
    return Promise.resolve(event);
  }

  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    if (typeof handler !== 'function')
      throw new TypeError(`bus: the handler for "${type}" must be a function`);
    const subscription: Subscription = { handler: handler as BusHandler, active: true };
    let set = this.subscriptions.get(type);
    if (!set) this.subscriptions.set(type, (set = new Set()));
    set.add(subscription);
    return () => {
      // Also stops a delivery already in progress for this event from reaching the handler.
      subscription.active = false;
      const current = this.subscriptions.get(type);
      current?.delete(subscription);
      if (current?.size === 0) this.subscriptions.delete(type);
    };
  }

  /** Every app sharing this bus (in-process nodes of a test) hears it, on a later macrotask. */
  signalDispatched(tokens: readonly string[]): void {
    if (tokens.length === 0) return;
    const copy = [...tokens];
    setImmediate(() => {
      for (const handler of this.signalHandlers) handler(copy);
    });
  }

  onDispatched(handler: (tokens: readonly string[]) => void): () => void {
    this.signalHandlers.add(handler);
    return () => this.signalHandlers.delete(handler);
  }

  /**
   * Queues an event minted elsewhere (another node, via a transport) for this process's handlers;
   * false when none wants it.
   */
  deliver(event: BusEvent): boolean {
    this.queue.push(event);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.drain());
    }
    return this.wants(event.type);
  }

  /** How many handlers here subscribed to exactly `type` (`*` counts the wildcard's). */
  handlers(type: string): number {
    return this.subscriptions.get(type)?.size ?? 0;
  }

  /** Whether a handler here takes events of `type` (its own subscribers, or the wildcard's). */
  wants(type: string): boolean {
    return this.subscriptions.has(type) || this.subscriptions.has('*');
  }

  private drain(): void {
    this.scheduled = false;
    // Events published by handlers during this drain go to the next one.
    const events = this.queue.splice(0);
    for (const event of events) {
      const targets = [
        ...(this.subscriptions.get(event.type) ?? []),
        ...(this.subscriptions.get('*') ?? []),
      ];
      for (const subscription of targets) {
        if (subscription.active) this.call(subscription.handler, event);
      }
    }
  }

  private call(handler: BusHandler, event: BusEvent): void {
    try {
      const result = handler(event);
      if (result && typeof (result as PromiseLike<void>).then === 'function') {
        Promise.resolve(result).catch((error: unknown) => this.failed(event, error));
      }
    } catch (error) {
      this.failed(event, error);
    }
  }

  private failed(event: BusEvent, error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    this.logger.error(
      `a handler of "${event.type}" failed on event ${event.eventId}: ${message}`,
      error instanceof Error ? error.stack : undefined,
    );
  }
}
