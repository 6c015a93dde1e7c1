import { Logger } from '@nestjs/common';
import type pg from 'pg';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import { EventIdConflictError } from './bus-errors.js';
import { BusListener } from './bus-listener.js';
import type { ListeningAnnouncement } from './bus-audience.interface.js';
import type { BusStatus } from './bus-status.interface.js';
import { BusNotifier } from './bus-notifier.js';
import { BusSignals } from './bus-signals.js';
import { BusPositions } from './bus-positions.js';
import { BusReader, type ReaderSink } from './bus-reader.js';
import { BusRetention } from './bus-retention.js';
import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import type { DispatchSignals } from './dispatch-signals.interface.js';
import type { DurableEvents, EventScope } from './durable-events.interface.js';
import { DurableConsumers } from './durable-consumers.js';
import type { DurableHandler, DurableSubscriptions } from './durable-subscriptions.interface.js';
import type { EventLog } from './event-log.js';
import { EventPublisher, boundedEvent } from './event-publisher.js';
import { LocalBus } from './local-bus.js';
import { idleWriteMs, positionFlushMs } from './position-flush.js';
import type { BusObserver, PostgresBusOptions } from './postgres-bus-options.interface.js';
import { ScopedLogs } from './scoped-logs.js';
import { READER_GRACE_SECONDS, type LifecycleReads } from './lifecycle-reads.interface.js';
import { LifecycleReadSet } from './lifecycle-read-set.js';

/**
 * The durable bus. An event is a row of cyclium_events, committed before `publish` resolves; a
 * NOTIFY after the commit only says "look". Every node reads its channel's new rows from its own
 * cursor (BusReader) when woken, after every reconnect and on a fallback timer, so an event
 * committed while a node was not listening still reaches it. Publishing is group-committed: one
 * statement per batch, the first at once, the rest coalesced while it is in flight. Lifecycle
 * events commit inside the transactions that write the states they announce (`appendWithin`).
 *
 * Contract: every node that is up sees every event of its stack and env at least once, in commit
 * order per publisher; the event id is stable, and a repeated id is stored once: an identical
 * retry resolves, the same id with another type or payload is refused (EventIdConflictError).
 * A publish is stored or refused, never dropped: ids, types and payloads are bounded before
 * anything is queued, one bad event in a batch fails only its own publish, and a full queue
 * refuses at once. Payloads make a JSON round trip (jsonb: object keys may come back reordered).
 */
export class PostgresBus
  extends Bus
  implements
    DurableEvents,
    DurableSubscriptions,
    DispatchSignals,
    ListeningAnnouncement,
    LifecycleReads
{
  private readonly local = new LocalBus();
  private readonly logger = new Logger('CycliumBus');
  private readonly log: EventLog;
  private readonly scoped: ScopedLogs;
  private readonly listener: BusListener;
  private readonly reader: BusReader;
  private readonly consumers: DurableConsumers;
  private readonly retention: BusRetention;
  private readonly publisher: EventPublisher;
  private readonly signals: BusSignals;
  private readonly observer: BusObserver | undefined;
  private readonly readersStaleSeconds: number;
  private readonly reads: LifecycleReadSet;

  constructor(sql: SqlExecutor, listenConfig: () => pg.ClientConfig, options: PostgresBusOptions) {
    super();
    const { channel } = options;
    // LISTEN silently truncates a longer identifier while pg_notify rejects it: the two would never
    // meet.
    if (typeof channel !== 'string' || channel === '' || Buffer.byteLength(channel, 'utf8') > 63) {
      throw new TypeError(
        `PostgresBus: channel must be 1 to 63 bytes (got ${JSON.stringify(channel)})`,
      );
    }
    this.observer = options.observer;
    this.readersStaleSeconds = options.readersStaleSeconds ?? READER_GRACE_SECONDS;
    const identity = options.publisher ?? (() => 'unknown');
    this.scoped = new ScopedLogs(sql, {
      channel,
      stackSlug: options.stackSlug ?? null,
      env: options.env ?? null,
      publisher: identity,
      integrity: options.integrity,
    });
    this.log = this.scoped.own;
    const spacingMs = options.spacingMs ?? 10;
    const undispatchedMaxAgeMs = options.undispatchedMaxAgeMs ?? 604_800_000;
    this.retention = new BusRetention(
      sql,
      this.log,
      options.retentionMs ?? 3_600_000,
      undispatchedMaxAgeMs,
    );
    const flushMs = options.positionFlushMs ?? positionFlushMs(1, undispatchedMaxAgeMs);
    const positions = new BusPositions(channel);
    const flushEvery = typeof flushMs === 'function' ? flushMs : () => flushMs;
    this.consumers = new DurableConsumers(
      sql,
      this.log,
      positions,
      flushEvery,
      idleWriteMs(undispatchedMaxAgeMs),
    );
    this.reads = new LifecycleReadSet(
      this.local,
      (type) => this.consumers.wants(type),
      this.logger,
    );
    const sink: ReaderSink = {
      catchUp: (cursor, paging) => this.consumers.catchUp(cursor, paging),
      deliver: (logged, readAt) => {
        if (logged.oversizedBytes !== null) {
          this.consumers.skipOversized(logged);
          return false;
        }
        if (!logged.trusted) {
          this.logger.warn(
            `ignored event ${logged.id} (${logged.event.type}, id ${logged.event.eventId}): a ` +
              `reserved type without this deployment's signature`,
          );
          return false;
        }
        const durable = this.consumers.deliver(logged, readAt);
        return this.local.deliver(logged.event) || durable;
      },
      readTo: (snapshot) => this.consumers.readTo(snapshot),
      read: options.observer && ((count) => options.observer?.read(count)),
    };
    this.reader = new BusReader(sql, this.log, sink, options.pollIntervalMs ?? 10_000, spacingMs);
    this.listener = new BusListener(
      listenConfig,
      channel,
      {
        onNotify: (payload) => this.signals.hear(BusNotifier.parse(payload)),
        onListening: () => this.reader.wake(),
      },
      {
        sql: options.echoSql ?? sql,
        intervalMs: options.echoIntervalMs ?? 10_000,
        timeoutMs: options.echoTimeoutMs ?? 5_000,
      },
    );
    this.publisher = new EventPublisher(sql, this.log, (types) => this.wake(types), {
      maxPayloadBytes: options.maxPayloadBytes,
      queueMax: options.publishQueueMax,
    });
    this.signals = new BusSignals(
      sql,
      channel,
      options.notifySpacingMs ?? spacingMs,
      identity,
      options.audience,
      options.publisher,
      () => this.reader.wake(),
      (type) => this.wants(type),
    );
  }

  get channel(): string {
    return this.log.channel;
  }

  /** True while the LISTEN connection is up. */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** How this node's side of the bus is doing, for health checks. */
  status(): BusStatus {
    const degradedReason = this.listener.degradedReason ?? null;
    return {
      listening: this.listener.listening,
      degraded: degradedReason !== null,
      degradedReason,
      heardAgoMs: roundOrNull(this.listener.heardAgoMs),
      disconnectedForMs: Math.round(this.listener.disconnectedForMs),
      lastReadAgoMs: roundOrNull(this.reader.lastReadAgoMs),
      lagMs: this.reader.lagMs,
      readFailing: this.reader.failing,
      undispatchedPruned: this.retention.undispatchedPruned,
      unsettledEvents: this.consumers.unsettled,
    };
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    return this.publisher.publish(type, payload, options);
  }

  /**
   * Handlers get the events committed after this node began to read (its boot), at least once:
   * what committed while it was down is not replayed to them. For that, see `subscribeDurable`.
   * Of the lifecycle events written only when read (DECLARED_LIFECYCLE_TYPES), those of the ends
   * that look after this node's row names the type (LifecycleDeclarations).
   */
  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.reads.adding(type, () => this.local.subscribe(type, handler));
  }

  subscribeUndeclared<P>(type: string, handler: BusHandler<P>): () => void {
    return this.reads.undeclaredly(type, () => this.local.subscribe(type, handler));
  }

  lifecycleReads(): string[] {
    return this.reads.types();
  }

  onLifecycleReads(listener: () => Promise<void>): () => void {
    return this.reads.onChange(listener);
  }

  lifecycleReadsStored(): Promise<void> {
    return this.reads.stored();
  }

  readCondition(statement: Statement, type: string, scope?: EventScope): string {
    const log = this.scoped.of(scope);
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    // A sub-SELECT with no outer reference: an InitPlan, asked once however many rows test it.
    return (
      `(SELECT cyclium_lifecycle_read(${p(log.channel, 'text')}, ${p(log.stackSlug, 'text')}, ` +
      `${p(log.env, 'text')}, ${p(type, 'text')}, ` +
      `${p(this.readersStaleSeconds, 'float8')}))`
    );
  }

  /**
   * `consumer` gets every event of `type` committed since its stored position, then the live ones
   * (see DurableConsumers); its position moves past an event once the handler's promise settles.
   */
  subscribeDurable<P>(consumer: string, type: string, handler: DurableHandler<P>): () => void {
    if (typeof handler !== 'function')
      throw new TypeError(`bus: the handler of consumer "${consumer}" must be a function`);
    const unsubscribe = this.reads.adding(type, () =>
      this.consumers.add(consumer, type, handler as DurableHandler),
    );
    this.reader.wake();
    return unsubscribe;
  }

  /**
   * Stores `events` on `client`, inside the caller's transaction: they commit with it or not at
   * all. An id already stored with another type or payload throws EventIdConflictError (roll back).
   */
  async appendWithin(
    client: SqlExecutor,
    events: readonly BusEvent[],
    scope?: EventScope,
  ): Promise<void> {
    const outcomes = await this.scoped.of(scope).append(client, events.map(boundedEvent));
    const conflict = events.find((_, i) => outcomes[i] === 'conflict');
    if (conflict) throw new EventIdConflictError(conflict.eventId, conflict.type);
  }

  appendFragment(
    statement: Statement,
    events: readonly BusEvent[],
    when: string,
    scope?: EventScope,
  ): string {
    return this.scoped.of(scope).appendFragment(statement, events.map(boundedEvent), when);
  }

  /**
   * A host's publish inside its own transaction: stored on `client`, its listeners told by a NOTIFY
   * that PostgreSQL delivers at that commit (and drops with a rollback). Bounded and checked as
   * `publish` is.
   */
  async publishWithin<P>(
    client: SqlExecutor,
    type: string,
    payload: P,
    options?: PublishOptions,
  ): Promise<BusEvent<P>> {
    const { event, stored } = await this.publisher.publishWithin(client, type, payload, options);
    if (stored) {
      this.observer?.published(1);
      await client.query(`SELECT pg_notify($1, '')`, [this.channel]);
    }
    return event;
  }

  wakeAtCommitFragment(statement: Statement, when: string): string {
    return `SELECT pg_notify(${statement.param(this.channel, 'text')}, '') WHERE ${when}`;
  }

  appendManyFragment(
    statement: Statement,
    events: readonly BusEvent[],
    positions: string,
    scope?: EventScope,
  ): string {
    return this.scoped
      .of(scope)
      .appendFragment(statement, events.map(boundedEvent), `e.n IN (${positions})`);
  }

  /**
   * Tells the channel this node listens (NodeRegistry, once its row is written): a node that
   * thought itself alone NOTIFYs again from now on, and at once for what it committed unannounced.
   */
  announceListening(): void {
    this.signals.announceListening();
  }

  /**
   * Wakes the listeners of the channel; call once the transaction that appended has committed.
   * With `types`, only the nodes where a handler wants one of them read (this one too: alone on
   * the channel, in-process): a node would otherwise read events back for nobody. What a node
   * skips it reads with its next read (a wanted event, or the fallback timer). Another scope's
   * channel gets a plain wake-up (ScopedLogs.wake).
   */
  wake(types?: readonly string[], scope?: EventScope): void {
    const log = this.scoped.of(scope);
    if (log !== this.log) return this.scoped.wake(log);
    const typed = types !== undefined && types.length > 0;
    if (typed) this.observer?.published(types.length);
    this.signals.wake(!typed || types.some((type) => this.wants(type)), typed ? types : undefined);
  }

  /** Whether a handler on this node takes events of `type` (a subscriber or a durable consumer). */
  private wants(type: string): boolean {
    return this.local.wants(type) || this.consumers.wants(type);
  }

  signalDispatched(tokens: readonly string[]): void {
    this.signals.signal(tokens);
  }

  onDispatched(handler: (tokens: readonly string[]) => void): () => void {
    return this.signals.onDispatched(handler);
  }

  /**
   * LISTENs, takes the end of the table as this node's cursor, and starts pruning. Rejects if the
   * database is away.
   */
  async start(): Promise<void> {
    await this.listener.start();
    await this.reader.start();
    this.retention.start();
    this.consumers.start();
  }

  /**
   * Stops reading and pruning and closes the LISTEN connection. Publishing keeps working (it uses
   * the host pool).
   */
  async stop(): Promise<void> {
    await this.retention.stop();
    await this.consumers.stop();
    await this.listener.stop();
    await this.reader.stop();
  }

  /**
   * Resolves once every publish and wake-up asked for so far has been sent, and the settled
   * positions stored.
   */
  async flushPending(): Promise<void> {
    await this.publisher.idle();
    await this.signals.idle();
    await this.consumers.flush(true);
  }

  /** Reads this node's channel now (tests, and a host that wants to be sure it is current). */
  catchUp(): Promise<void> {
    return this.reader.catchUp();
  }

  /** See DurableSubscriptions.readThrough. */
  readThrough(): Promise<void> {
    return this.reader.readThrough();
  }

  // ── retention ─────────────────────────────────────────────────────────────────────────────────

  /**
   * Deletes events past the retention window now, in batches (see BusRetention); also runs on a
   * timer. Resolves with the count.
   */
  pruneNow(): Promise<number> {
    return this.retention.pruneNow();
  }
}

function roundOrNull(value: number | null): number | null {
  return value === null ? null : Math.round(value);
}
