import type { Statement } from '../sql/statement.js';
import type { BusHandler } from './bus.interface.js';
import type { EventScope } from './durable-events.interface.js';

/**
 * The lifecycle events an episode's end writes only when something reads them: nodes declare
 * which of these their handlers take (LifecycleDeclarations), durable consumers are found by their
 * stored positions. A workflow step's events are always written.
 */
export const DECLARED_LIFECYCLE_TYPES: readonly string[] = [
  'episode.completed',
  'episode.failed',
  'episode.canceled',
];

/**
 * How long a node row not refreshed still counts as a reader (seconds; the node's own setting is
 * three beats when that is longer). Minutes, not the peers' three beats: a live node cut off from
 * the database (a failover, a partition) stops beating while its handlers still wait for events,
 * and an event not written for it is lost to them for good, while one written for a node that
 * died costs a row. Only an outage longer than this costs a cut-off node's handlers the ends that
 * commit before its next beat; a durable consumer loses none.
 */
export const READER_GRACE_SECONDS = 300;

/**
 * A bus that can say which of DECLARED_LIFECYCLE_TYPES this node's handlers take, and write such
 * an event only when a reader of its scope is declared (PostgresBus). A bus without it declares
 * nothing, and its node reads every type: ends always write the event.
 */
export interface LifecycleReads {
  /** The declared lifecycle types this node's handlers take; `*` when one takes every type. */
  lifecycleReads(): string[];
  /**
   * Calls `listener` (which stores the answer, and resolves once it did or gave up) when a handler
   * starts taking a type the last answer did not name.
   */
  onLifecycleReads(listener: () => Promise<void>): () => void;
  /** Resolves once the listeners stored what the handlers read now (at once without listeners). */
  lifecycleReadsStored(): Promise<void>;
  /**
   * A subscription left out of the declaration: its handler needs only events that are always
   * written (a workflow engine hears its steps' ends).
   */
  subscribeUndeclared<P>(type: string, handler: BusHandler<P>): () => void;
  /**
   * A SQL condition (evaluated once per statement) that holds when something reads the lifecycle
   * events of `type` in `scope` (this node's own when absent).
   */
  readCondition(statement: Statement, type: string, scope?: EventScope): string;
}

export function readsLifecycle<T extends object>(bus: T): bus is T & LifecycleReads {
  const candidate = bus as Partial<LifecycleReads>;
  return (
    typeof candidate.lifecycleReads === 'function' &&
    typeof candidate.onLifecycleReads === 'function' &&
    typeof candidate.lifecycleReadsStored === 'function' &&
    typeof candidate.subscribeUndeclared === 'function' &&
    typeof candidate.readCondition === 'function'
  );
}
