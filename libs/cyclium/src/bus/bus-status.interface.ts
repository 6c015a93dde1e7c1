import type { Bus } from './bus.interface.js';

/** How a node's side of the bus is doing; PostgresBus reports it, a custom Bus may. */
export interface BusStatus {
  /** The wake-up connection is up. */
  listening: boolean;
  /**
   * The wake-up connection is open but does not hear its own echo NOTIFY (half-open, or a pooler in
   * transaction mode): wake-ups are lost and events wait for the fallback poll. Optional for a
   * custom Bus.
   */
  degraded?: boolean;
  /** Why it is degraded; null when it is not. */
  degradedReason?: string | null;
  /**
   * Since the wake-up connection last heard anything on the channel (an echo or not); null before
   * the first or with the self-check off.
   */
  heardAgoMs?: number | null;
  /** How long it has been down (0 while listening). */
  disconnectedForMs: number;
  /** Since the last successful read of the events table; null before the first. */
  lastReadAgoMs: number | null;
  /**
   * How old the newest event a handler on this node wanted was when this node read it (database
   * clock); null before any.
   */
  lagMs: number | null;
  /** The last read failed (the database is away, say). */
  readFailing: boolean;
  /**
   * Events retention deleted since boot although a consumer had not dispatched them
   * (busUndispatchedMaxAgeMs); optional for a custom Bus.
   */
  undispatchedPruned?: number;
  /**
   * Events this node's durable consumers were handed and have not settled (dispatching, waiting out
   * a debounce or for a slot); their positions stay before them. Optional for a custom Bus.
   */
  unsettledEvents?: number;
}

export function busStatusOf(bus: Bus): BusStatus | null {
  const candidate = bus as Partial<{ status(): BusStatus }>;
  return typeof candidate.status === 'function' ? candidate.status() : null;
}
