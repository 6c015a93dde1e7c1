import type { Bus, BusEvent } from './bus.interface.js';

/** How a durable consumer came to read an event, with its committed time on the database clock. */
export interface EventReceipt {
  /** When the event was stored, by the database clock (epoch milliseconds). */
  readonly committedAt: number;
  /** Its age by the database clock when it was read… */
  readonly ageMs: number;
  /** …which was at this `performance.now()` on this node. */
  readonly readAt: number;
}

/**
 * Settles once the event has been dispatched for the consumer (or need not be). Until then the
 * consumer's stored position stays before it, so after any stop the event is read again; a handler
 * that never settles (the node drained first) leaves it to the next reader. A rejection is a reason
 * of the event's own: it is recorded on the position row and the event is skipped.
 */
export type DurableHandler<P = unknown> = (
  event: BusEvent<P>,
  receipt: EventReceipt,
) => Promise<void>;

/**
 * What a bus offers when it can replay: a named consumer gets every event of its type committed
 * since its stored position, whichever node (or none) was reading at the time. A custom Bus may
 * implement it; without it, events committed while no node reads are lost.
 */
export interface DurableSubscriptions {
  /** Returns the unsubscribe function. `consumer` names the position (one per expectation). */
  subscribeDurable<P>(consumer: string, type: string, handler: DurableHandler<P>): () => void;
  /**
   * Optional: resolves once this node has handed its consumers every event committed before the
   * call (a read that began after it succeeded). A debounce window closes only then, so a node
   * whose reads lag never fires an event that a later one, unread here, supersedes. Without it a
   * window closes on its time alone.
   */
  readThrough?(): Promise<void>;
}

export function hasDurableSubscriptions(bus: Bus): bus is Bus & DurableSubscriptions {
  return typeof (bus as Partial<DurableSubscriptions>).subscribeDurable === 'function';
}
