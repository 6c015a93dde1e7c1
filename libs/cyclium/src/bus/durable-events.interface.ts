import type { SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { Bus, BusEvent, PublishOptions } from './bus.interface.js';

/**
 * The stack and env an event belongs to when they are not the writing node's own: the lifecycle
 * events of an episode that a node of another scope ran (a stackless node, or a poller that takes
 * every stack's requests) go where the nodes of the episode's own stack and env read.
 */
export interface EventScope {
  readonly stackSlug: string | null;
  readonly env: string | null;
}

/**
 * What a bus offers when its events live in this database: the library then writes each lifecycle
 * event in the transaction that changes the state it announces (an outbox), so a terminal status
 * without its event, or an event without its status, cannot exist. A custom Bus may implement it.
 */
export interface DurableEvents {
  /**
   * Stores `events` on `client`, inside the caller's open transaction. `scope`, when given, is
   * where they belong (see EventScope); a bus with one channel may ignore it, as it may in every
   * method below.
   */
  appendWithin(client: SqlExecutor, events: readonly BusEvent[], scope?: EventScope): Promise<void>;
  /**
   * The same as the body of a CTE in a statement the library composes (`INSERT … RETURNING`),
   * writing only when the SQL condition `when` holds, so an outcome and its event are one round
   * trip. The library passes only events it has just minted (fresh ids), so the body need not
   * compare or skip ids already stored.
   */
  appendFragment(
    statement: Statement,
    events: readonly BusEvent[],
    when: string,
    scope?: EventScope,
  ): string;
  /**
   * Optional: the same for a batch of outcomes, writing only the events whose 1-based position in
   * `events` is in the SQL set `positions` (a subquery of integers). Without it, terminal writes
   * are never batched.
   */
  appendManyFragment?(
    statement: Statement,
    events: readonly BusEvent[],
    positions: string,
    scope?: EventScope,
  ): string;
  /**
   * Tells listeners there is something to read; called after that transaction committed, with the
   * types of the events it wrote (a bus may then spare readers that want none of them).
   */
  wake(types?: readonly string[], scope?: EventScope): void;
  /**
   * Optional: a host's publish through its own open transaction (`Bus.publish(…, { manager })`),
   * bounded as `publish` is, its listeners woken when that transaction commits. Without it such a
   * publish is refused.
   */
  publishWithin?<P>(
    client: SqlExecutor,
    type: string,
    payload: P,
    options?: PublishOptions,
  ): Promise<BusEvent<P>>;
  /**
   * Optional: the body of a CTE that asks, inside the caller's transaction, for the listeners to
   * be woken when it commits, if the SQL condition `when` holds (a NOTIFY is delivered at commit,
   * and not at all after a rollback). For writes whose commit the library does not see: the
   * host's transaction. Without it, nodes find such writes at their next poll.
   */
  wakeAtCommitFragment?(statement: Statement, when: string): string;
}

export function isDurable(bus: Bus): bus is Bus & DurableEvents {
  const candidate = bus as Partial<DurableEvents>;
  return (
    typeof candidate.appendWithin === 'function' &&
    typeof candidate.appendFragment === 'function' &&
    typeof candidate.wake === 'function'
  );
}
