import { Inject, Injectable, Logger } from '@nestjs/common';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Statement } from '../sql/statement.js';
import { Bus, type BusEvent, type BusHandler } from './bus.interface.js';
import { isDurable, type EventScope } from './durable-events.interface.js';
import { hasDurableSubscriptions, type DurableHandler } from './durable-subscriptions.interface.js';
import { mintBusEvent } from './local-bus.js';
import { readsLifecycle } from './lifecycle-reads.interface.js';
import { ReadChecks } from './read-checks.js';

export interface OutgoingEvent {
  type: string;
  payload: unknown;
  /** Where the event belongs (an episode's stack and env); absent: this node's own. */
  scope?: EventScope;
  /**
   * Written by `fragment` and `fragmentMany` only when something reads it (LifecycleReads), on a
   * bus that can tell; `within` always writes.
   */
  ifRead?: boolean;
}

/** What to call once the transaction that staged events has committed. */
export type Announce = () => void;

/**
 * The same for events written only if read: given the row of the statement's final SELECT, wakes
 * nobody for those that were not written.
 */
export type AnnounceRead = (row?: Readonly<Record<string, unknown>>) => void;

/**
 * How the library itself talks on the bus: its reserved types (lifecycle events, cancel requests)
 * go straight to the transport, past the guard hosts get. With a durable bus, `within` writes
 * the events in the caller's transaction; with any other bus they are published after commit,
 * as well as that bus can.
 */
@Injectable()
export class EventOutbox {
  private readonly logger = new Logger('CycliumBus');

  constructor(@Inject(CYCLIUM_BUS_TRANSPORT) private readonly transport: Bus) {}

  /**
   * Stages `events` inside the caller's transaction on `client`; returns what to call after it
   * committed. `wake: false` lets events nobody waits for ride along with the next wake-up
   * instead of costing one of their own.
   */
  async within(
    client: SqlExecutor,
    events: readonly OutgoingEvent[],
    options: { wake?: boolean } = {},
  ): Promise<Announce> {
    // Nothing to say must not wake anyone: every NOTIFY costs each listening connection a
    // transaction.
    if (events.length === 0) return noop;
    const transport = this.transport;
    if (isDurable(transport)) {
      const groups = byScope(events);
      for (const group of groups)
        await transport.appendWithin(
          client,
          group.events.map((e) => mintBusEvent(e.type, e.payload)),
          group.scope,
        );
      return options.wake === false
        ? noop
        : () => groups.forEach((g) => transport.wake(typesOf(g.events), g.scope));
    }
    return () => {
      for (const event of events) this.announce(event.type, event.payload);
    };
  }

  /**
   * The events as a CTE body of a statement the library composes, written when `when` holds; null
   * when the bus is not durable (then `announce` publishes them after commit). The events share
   * one scope (the first one's). Events written only if read add `columns` for the statement's
   * final SELECT; `announce` given its row wakes nobody when they were not written.
   */
  fragment(
    statement: Statement,
    events: readonly OutgoingEvent[],
    when: string,
    options: { wake?: boolean } = {},
  ): { body: string | null; columns: string; announce: AnnounceRead } {
    const transport = this.transport;
    if (isDurable(transport)) {
      const scope = events[0]?.scope;
      const checks = new ReadChecks(transport, statement);
      const read = checks.together(events, scope);
      const body = transport.appendFragment(
        statement,
        events.map((e) => mintBusEvent(e.type, e.payload)),
        read === null ? when : `(${when}) AND ${read}`,
        scope,
      );
      return {
        body,
        columns: checks.columns,
        announce:
          options.wake === false
            ? noop
            : (row) => {
                if (checks.written(1, row)) transport.wake(typesOf(events), scope);
              },
      };
    }
    return {
      body: null,
      columns: '',
      announce: () => events.forEach((e) => this.announce(e.type, e.payload)),
    };
  }

  /**
   * A CTE body that wakes the listeners when the caller's transaction commits, if `when` holds
   * (DurableEvents.wakeAtCommitFragment): for writes in the host's transaction, whose commit the
   * library does not see. Null when the transport cannot (nodes then find the writes by polling).
   */
  wakeAtCommit(statement: Statement, when: string): string | null {
    const transport = this.transport;
    return isDurable(transport) && transport.wakeAtCommitFragment
      ? transport.wakeAtCommitFragment(statement, when)
      : null;
  }

  /**
   * `wakeAtCommit` as a statement of its own on `client`, for a transaction of the host's that the
   * library wrote several statements in.
   */
  async wakeAtCommitOn(client: SqlExecutor): Promise<void> {
    const statement = new Statement('wake_at_commit');
    const body = this.wakeAtCommit(statement, 'true');
    if (body) await client.query(statement.with('w', body).build('SELECT count(*) FROM w'));
  }

  /**
   * False when the transport is durable but cannot write a batch of outcomes' events (each is then
   * written alone).
   */
  get batches(): boolean {
    return !isDurable(this.transport) || typeof this.transport.appendManyFragment === 'function';
  }

  /**
   * `fragment` for a batch of outcomes: writes the events whose 1-based position is in the SQL set
   * `positions`; `announce` takes the positions whose outcomes were written (and the final
   * SELECT's row, with `columns` in it, to leave out events written only if read that were not).
   * Only when `batches`. One body per scope the events belong to (one, unless the batch ran
   * episodes of other scopes), each a CTE of its own.
   */
  fragmentMany(
    statement: Statement,
    events: readonly OutgoingEvent[],
    positions: string,
  ): {
    bodies: string[];
    columns: string;
    announce: (written: readonly number[], row?: Readonly<Record<string, unknown>>) => void;
  } {
    const transport = this.transport;
    if (isDurable(transport) && transport.appendManyFragment) {
      const all = events.map((e) => mintBusEvent(e.type, e.payload));
      const groups = byScope(events);
      const checks = new ReadChecks(transport, statement);
      const bodies = groups.map((group, g) =>
        (transport.appendManyFragment as NonNullable<typeof transport.appendManyFragment>)(
          statement,
          all,
          checks.among(
            group.events,
            group.positions,
            group.scope,
            g + 1,
            groups.length === 1
              ? positions
              : `SELECT p.n FROM (${positions}) p (n) ` +
                  `WHERE p.n = ANY(${statement.param(group.positions, 'int[]')})`,
          ),
          group.scope,
        ),
      );
      return {
        bodies,
        columns: checks.columns,
        announce: (written, row) => {
          for (const group of groups) {
            const types = written
              .filter((n) => group.positions.includes(n) && checks.written(n, row))
              .map((n) => (events[n - 1] as OutgoingEvent).type);
            if (types.length > 0) transport.wake(types, group.scope);
          }
        },
      };
    }
    return {
      bodies: [],
      columns: '',
      announce: (written) => {
        for (const n of written) {
          const event = events[n - 1] as OutgoingEvent;
          this.announce(event.type, event.payload);
        }
      },
    };
  }

  /** Publishes a library event; rejects when the transport could not take it. */
  publish(type: string, payload: unknown): Promise<BusEvent> {
    return this.transport.publish(type, payload);
  }

  /**
   * Publishes without waiting; a failure is logged (the state the event announces is already
   * written).
   */
  announce(type: string, payload: unknown): void {
    this.transport
      .publish(type, payload)
      .catch((error: unknown) =>
        this.logger.warn(`could not publish ${type}: ${errorMessage(error)}`),
      );
  }

  /**
   * `undeclared`: the handler needs only events that are always written (a workflow engine's,
   * which hears its own steps' ends), so it does not make this node a reader of the lifecycle
   * events every end would otherwise write (LifecycleReads).
   */
  subscribe<P>(
    type: string,
    handler: BusHandler<P>,
    options: { undeclared?: boolean } = {},
  ): () => void {
    const transport = this.transport;
    return options.undeclared && readsLifecycle(transport)
      ? transport.subscribeUndeclared(type, handler)
      : transport.subscribe(type, handler);
  }

  /**
   * Resolves once this node's row says what its handlers read of the lifecycle events written only
   * when read (LifecycleReads); at once on a bus that cannot tell.
   */
  readsStored(): Promise<void> {
    const transport = this.transport;
    return readsLifecycle(transport) ? transport.lifecycleReadsStored() : Promise.resolve();
  }

  /** True when the transport replays to named consumers (see DurableSubscriptions). */
  get replays(): boolean {
    return hasDurableSubscriptions(this.transport);
  }

  /**
   * Resolves once the transport has handed over every event committed before the call (see
   * DurableSubscriptions.readThrough).
   */
  readThrough(): Promise<void> {
    const transport = this.transport;
    return hasDurableSubscriptions(transport) && transport.readThrough
      ? transport.readThrough()
      : Promise.resolve();
  }

  /**
   * A named consumer that gets what committed since its stored position; on a transport that
   * cannot replay, a plain subscription (the handler's settling then means nothing).
   */
  subscribeDurable<P>(consumer: string, type: string, handler: DurableHandler<P>): () => void {
    const transport = this.transport;
    if (hasDurableSubscriptions(transport))
      return transport.subscribeDurable(consumer, type, handler);
    return transport.subscribe<P>(type, (event) => {
      handler(event, { committedAt: Date.now(), ageMs: 0, readAt: performance.now() }).catch(
        (error: unknown) =>
          this.logger.warn(
            `${consumer} could not take event ${event.eventId}: ${errorMessage(error)}`,
          ),
      );
    });
  }
}

const noop: Announce = () => undefined;

const typesOf = (events: readonly OutgoingEvent[]): string[] => events.map((e) => e.type);

interface ScopeGroup {
  scope: EventScope | undefined;
  events: OutgoingEvent[];
  /** 1-based, in the whole batch. */
  positions: number[];
}

/** The events grouped by the scope they belong to, in order, with their 1-based positions. */
function byScope(events: readonly OutgoingEvent[]): ScopeGroup[] {
  const groups = new Map<string, ScopeGroup>();
  events.forEach((event, i) => {
    const key = event.scope ? `${event.scope.stackSlug ?? ''}\u0000${event.scope.env ?? ''}` : '';
    const group = groups.get(key) ?? { scope: event.scope, events: [], positions: [] };
    group.events.push(event);
    group.positions.push(i + 1);
    groups.set(key, group);
  });
  return [...groups.values()];
}
