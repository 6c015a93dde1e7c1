import type { SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { Bus, BusEvent } from './bus.interface.js';

/**
 * What a bus offers when its events live in this database: the library then writes each lifecycle
 * event in the transaction that changes the state it announces (an outbox), so a terminal status
 * without its event, or an event without its status, cannot exist. A custom Bus may implement it.
 */
export interface DurableEvents {
  /** Stores `events` on `client`, inside the caller's open transaction. */
  appendWithin(client: SqlExecutor, events: readonly BusEvent[]): Promise<void>;
  /**
   * The same as the body of a CTE in a statement the library composes (`INSERT … RETURNING`),
   * writing only when the SQL condition `when` holds, so an outcome and its event are one round
   * trip.
   */
  appendFragment(statement: Statement, events: readonly BusEvent[], when: string): string;
  /**
   * Optional: the same for a batch of outcomes, writing only the events whose 1-based position in
   * `events` is in the SQL set `positions` (a subquery of integers). Without it, terminal writes
   * are never batched.
   */
  appendManyFragment?(statement: Statement, events: readonly BusEvent[], positions: string): string;
  /**
   * Tells listeners there is something to read; called after that transaction committed, with the
   * types of the events it wrote (a bus may then spare readers that want none of them).
   */
  wake(types?: readonly string[]): void;
}

export function isDurable(bus: Bus): bus is Bus & DurableEvents {
  const candidate = bus as Partial<DurableEvents>;
  return (
    typeof candidate.appendWithin === 'function' &&
    typeof candidate.appendFragment === 'function' &&
    typeof candidate.wake === 'function'
  );
}
