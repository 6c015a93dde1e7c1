import type { HostTransaction } from '../transactions/host-transaction.js';
import type { TraceContext } from '../primitives/trace-context.js';

/** An event as every node receives it: the publisher mints `eventId` once. */
export interface BusEvent<P = unknown> {
  type: string;
  eventId: string;
  payload: P;
  publishedAt: string;
  /**
   * The W3C trace context active where the event was published (absent outside any trace): the
   * episodes it triggers continue that trace.
   */
  traceContext?: TraceContext;
}

/** Options of `Bus.publish`. */
export interface PublishOptions {
  /**
   * Reuse an id the caller already has (a webhook delivery id, say); minted when absent. At most
   * 200 characters. An id names one event: with PostgresBus, publishing it again with the same
   * type and payload is a safe retry, with another type or payload it is refused.
   */
  eventId?: string;
  /**
   * Publish inside this open transaction of the host's (needs `bus: 'postgres'`): the event is
   * stored with the host's writes and delivered once they commit; a rollback leaves no event.
   * The promise resolves once the row is written in that transaction (not yet committed).
   */
  manager?: HostTransaction;
}

/** A subscriber's callback; a returned promise is awaited. */
export type BusHandler<P = unknown> = (event: BusEvent<P>) => void | Promise<void>;

/**
 * How events travel between nodes; inject it to publish. Also the contract for bringing your own
 * transport: `class MyBus implements Bus { ... }`, passed as `bus`.
 */
export abstract class Bus {
  /**
   * Resolves once the event is on its way to every node (for PostgresBus: its row committed), or
   * rejects saying why it was not taken: InvalidBusEventError, EventIdConflictError,
   * DatabaseUnavailableError (PublishQueueFullError among them).
   */
  abstract publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>>;
  /** Returns the unsubscribe function. `'*'` receives every event. */
  abstract subscribe<P>(type: string, handler: BusHandler<P>): () => void;
}
