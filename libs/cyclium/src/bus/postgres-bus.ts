import { Logger } from '@nestjs/common';
import type pg from 'pg';
import { DatabaseUnavailableError, OutageLog, errorCode, errorMessage, isDatabaseUnavailable } from '../database/database-errors.js';
import { toJsonb } from '../database/jsonb.js';
import { MissingSchemaError } from '../database/missing-schema.error.js';
import type { SqlExecutor } from '../database/sql-executor.js';
import type { Statement } from '../database/statement.js';
import { EventIdConflictError, InvalidBusEventError, PublishQueueFullError } from './bus-errors.js';
import { BusListener } from './bus-listener.js';
import type { BusAudience, ListeningAnnouncement } from './bus-audience.interface.js';
import { BusNotifier, type Heard } from './bus-notifier.js';
import { BusPositions } from './bus-positions.js';
import { BusReader, type ReaderSink } from './bus-reader.js';
import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import type { DispatchSignals } from './dispatch-signals.interface.js';
import type { DurableEvents } from './durable-events.interface.js';
import { DurableConsumers } from './durable-consumers.js';
import type { DurableHandler, DurableSubscriptions } from './durable-subscriptions.interface.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, assertPayloadSize } from './event-bounds.js';
import { EventLog, type AppendOutcome, type StorableEvent } from './event-log.js';
import { GroupCommit, type Pending } from './group-commit.js';
import { LocalBus, mintBusEvent } from './local-bus.js';

const PRUNE_BATCH = 1_000;
const PRUNE_BATCHES_PER_PASS = 20;
const DEFAULT_PUBLISH_QUEUE_MAX = 10_000;

export interface PostgresBusOptions {
  /** The NOTIFY channel and the events' scope (see busChannel). */
  channel: string;
  stackSlug?: string | null;
  env?: string | null;
  /** Stamped on every stored event. */
  publisher?: () => string;
  /** Read even without a wake-up this often. Default 10 000. */
  pollIntervalMs?: number;
  /** Delete stored events older than this once every consumer's position has passed them. Default 3 600 000 (one hour). */
  retentionMs?: number;
  /** Delete events older than this even when a consumer's position has not passed them (warned and counted). Default a week. */
  undispatchedMaxAgeMs?: number;
  /** Refuse a published payload whose JSON is longer than this many bytes. Default 1 MiB. */
  maxPayloadBytes?: number;
  /**
   * At most this many publishes wait in memory for the database (queued or being stored); one
   * more is refused at once with PublishQueueFullError. Default 10 000.
   */
  publishQueueMax?: number;
  /**
   * Under load, the reads this node makes average at most one per this many milliseconds (a burst
   * of four goes at once), so one read serves everything that happened meanwhile; when idle it
   * does not wait. A function is read again each time. Default 10.
   */
  spacingMs?: number | (() => number);
  /**
   * The same for the NOTIFYs this node sends (wake-ups and dispatch signals together). Each one
   * costs every listening connection of the database a transaction, so CycliumModule grows it with
   * the cluster (see notifySpacingMs). Default: `spacingMs`.
   */
  notifySpacingMs?: number | (() => number);
  /**
   * How often this node stores its consumers' settled positions while events flow (one statement
   * for all of them, only when one moved). The positions of every node hosting an expectation go
   * to one row, the furthest wins, so CycliumModule spaces each node's writes by the cluster's size
   * and the cluster as a whole writes about once a second. A function is read again each time.
   * Default 1 000.
   */
  positionFlushMs?: number | (() => number);
  /**
   * Who else listens on the channel (CycliumModule passes Peers). While it says this node is
   * alone, wake-ups and signals are heard in-process and cost no NOTIFY. Without it, every
   * wake-up is a NOTIFY.
   */
  audience?: BusAudience;
}

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
export class PostgresBus extends Bus implements DurableEvents, DurableSubscriptions, DispatchSignals, ListeningAnnouncement {
  private readonly logger = new Logger(PostgresBus.name);
  private readonly local = new LocalBus();
  private readonly log: EventLog;
  private readonly listener: BusListener;
  private readonly reader: BusReader;
  private readonly consumers: DurableConsumers;
  private readonly positionsOutage = new OutageLog(this.logger, 'storing bus positions');
  private positionTimer: NodeJS.Timeout | undefined;
  private readonly positionFlushMs: () => number;
  private flushing: Promise<void> | undefined;
  private undispatchedPruned = 0;
  private readonly undispatchedMaxAgeMs: number;
  private readonly outbox: GroupCommit<StorableEvent>;
  private readonly notifier: BusNotifier;
  private readonly signalHandlers = new Set<(tokens: readonly string[]) => void>();
  private readonly pruneOutage = new OutageLog(this.logger, 'pruning cyclium_events');
  private readonly retentionMs: number;
  private readonly maxPayloadBytes: number;
  private pruneTimer: NodeJS.Timeout | undefined;
  private pruning: Promise<void> | undefined;
  private readonly audience: BusAudience | undefined;
  private readonly identity: () => string;

  constructor(
    private readonly sql: SqlExecutor,
    listenConfig: () => pg.ClientConfig,
    options: PostgresBusOptions,
  ) {
    super();
    const { channel } = options;
    // LISTEN silently truncates a longer identifier while pg_notify rejects it: the two would never meet.
    if (typeof channel !== 'string' || channel === '' || Buffer.byteLength(channel, 'utf8') > 63) {
      throw new TypeError(`PostgresBus: channel must be 1 to 63 bytes (got ${JSON.stringify(channel)})`);
    }
    this.retentionMs = options.retentionMs ?? 3_600_000;
    this.undispatchedMaxAgeMs = options.undispatchedMaxAgeMs ?? 604_800_000;
    const flushMs = options.positionFlushMs ?? 1_000;
    this.positionFlushMs = typeof flushMs === 'function' ? flushMs : () => flushMs;
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    const publishQueueMax = options.publishQueueMax ?? DEFAULT_PUBLISH_QUEUE_MAX;
    this.identity = options.publisher ?? (() => 'unknown');
    this.log = new EventLog({ channel, stackSlug: options.stackSlug ?? null, env: options.env ?? null, publisher: this.identity });
    this.audience = options.audience;
    const spacingMs = options.spacingMs ?? 10;
    this.consumers = new DurableConsumers(sql, this.log, new BusPositions(channel));
    const sink: ReaderSink = {
      catchUp: (cursor) => this.consumers.catchUp(cursor),
      deliver: (logged, readAt) => {
        const durable = this.consumers.deliver(logged, readAt);
        return this.local.deliver(logged.event) || durable;
      },
      readTo: (snapshot) => this.consumers.readTo(snapshot),
    };
    this.reader = new BusReader(sql, this.log, sink, options.pollIntervalMs ?? 10_000, spacingMs);
    this.listener = new BusListener(listenConfig, channel, {
      onNotify: (payload) => this.hear(BusNotifier.parse(payload)),
      onListening: () => this.reader.wake(),
    });
    this.outbox = new GroupCommit((batch) => this.store(batch), 1, {
      max: publishQueueMax,
      refuse: (item) => new PublishQueueFullError(publishQueueMax, describeEvent(item.event)),
    });
    const lone = this.audience ? { audience: this.audience, hear: (heard: Heard) => this.hear(heard) } : undefined;
    // Only a node with a name of its own can be told apart from its peers in a wake-up.
    this.notifier = new BusNotifier(sql, channel, options.notifySpacingMs ?? spacingMs, lone, options.publisher ?? (() => ''));
  }

  get channel(): string {
    return this.log.channel;
  }

  /** True while the LISTEN connection is up. */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** How this node's side of the bus is doing, for health checks. */
  status() {
    return {
      listening: this.listener.listening,
      disconnectedForMs: Math.round(this.listener.disconnectedForMs),
      lastReadAgoMs: roundOrNull(this.reader.lastReadAgoMs),
      lagMs: this.reader.lagMs,
      readFailing: this.reader.failing,
      undispatchedPruned: this.undispatchedPruned,
    };
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    let storable: StorableEvent;
    try {
      storable = storableEvent(mintBusEvent(type, payload, options));
      assertPayloadSize(storable.payloadJson, this.maxPayloadBytes, describeEvent(storable.event));
    } catch (error) {
      return Promise.reject(error);
    }
    return this.outbox.add(storable).then(() => storable.event as BusEvent<P>);
  }

  /**
   * Handlers get the events committed after this node began to read (its boot), at least once:
   * what committed while it was down is not replayed to them. For that, see `subscribeDurable`.
   */
  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.local.subscribe(type, handler);
  }

  /**
   * `consumer` gets every event of `type` committed since its stored position, then the live ones
   * (see DurableConsumers); its position moves past an event once the handler's promise settles.
   */
  subscribeDurable<P>(consumer: string, type: string, handler: DurableHandler<P>): () => void {
    if (typeof handler !== 'function') throw new TypeError(`bus: the handler of consumer "${consumer}" must be a function`);
    const unsubscribe = this.consumers.add(consumer, type, handler as DurableHandler);
    this.reader.wake();
    return unsubscribe;
  }

  /**
   * Stores `events` on `client`, inside the caller's transaction: they commit with it or not at
   * all. An id already stored with another type or payload throws EventIdConflictError (roll back).
   */
  async appendWithin(client: SqlExecutor, events: readonly BusEvent[]): Promise<void> {
    const outcomes = await this.log.append(client, events.map(storableEvent));
    const conflict = events.find((_, i) => outcomes[i] === 'conflict');
    if (conflict) throw new EventIdConflictError(conflict.eventId, conflict.type);
  }

  appendFragment(statement: Statement, events: readonly BusEvent[], when: string): string {
    return this.log.appendFragment(statement, events.map(storableEvent), when);
  }

  appendManyFragment(statement: Statement, events: readonly BusEvent[], positions: string): string {
    return this.log.appendFragment(statement, events.map(storableEvent), `e.n IN (${positions})`);
  }

  /**
   * Tells the channel this node listens (NodeRegistry, once its row is written): a node that
   * thought itself alone NOTIFYs again from now on, and at once for what it committed unannounced.
   */
  announceListening(): void {
    if (this.audience) this.notifier.announce(this.identity());
  }

  /**
   * Wakes every listener of the channel; call once the transaction that appended has committed.
   * This node's own reader is woken only when a handler here wants one of `types` (alone on the
   * channel, in-process; otherwise by a wake-up that names it as the one reader to skip): it would
   * read its own events back for nobody. They are read with its next read (a wanted event,
   * another node's, or the fallback timer).
   */
  wake(types?: readonly string[]): void {
    this.notifier.wake(types === undefined || types.some((type) => this.local.wants(type) || this.consumers.wants(type)));
  }

  signalDispatched(tokens: readonly string[]): void {
    this.notifier.signal(tokens);
  }

  onDispatched(handler: (tokens: readonly string[]) => void): () => void {
    this.signalHandlers.add(handler);
    return () => this.signalHandlers.delete(handler);
  }

  /** LISTENs, takes the end of the table as this node's cursor, and starts pruning. Rejects if the database is away. */
  async start(): Promise<void> {
    await this.listener.start();
    await this.reader.start();
    if (!this.pruneTimer) {
      this.pruneTimer = setInterval(() => this.prune(), Math.min(60_000, Math.max(1_000, this.retentionMs / 4)));
      this.pruneTimer.unref();
    }
    if (!this.positionTimer) this.schedulePositionFlush();
  }

  /** Stops reading and pruning and closes the LISTEN connection. Publishing keeps working (it uses the host pool). */
  async stop(): Promise<void> {
    clearInterval(this.pruneTimer);
    this.pruneTimer = undefined;
    clearTimeout(this.positionTimer);
    this.positionTimer = undefined;
    await this.flushing;
    await this.listener.stop();
    await this.reader.stop();
    await this.pruning;
  }

  /** Resolves once every publish and wake-up asked for so far has been sent, and the settled positions stored. */
  async flushPending(): Promise<void> {
    await this.outbox.idle();
    await this.notifier.idle();
    await this.flushPositions(true);
  }

  private schedulePositionFlush(): void {
    this.positionTimer = setTimeout(() => {
      void this.flushPositions(false).then(() => {
        if (this.positionTimer) this.schedulePositionFlush();
      });
    }, this.positionFlushMs());
    this.positionTimer.unref();
  }

  /** Stores the consumers' settled positions (one at a time; a failure is logged, and retried next time). */
  private flushPositions(all: boolean): Promise<void> {
    this.flushing ??= this.consumers
      .flush(all)
      .then(
        () => this.positionsOutage.succeeded(),
        (error: unknown) => this.positionsOutage.failed(error),
      )
      .finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  /** Reads this node's channel now (tests, and a host that wants to be sure it is current). */
  catchUp(): Promise<void> {
    return this.reader.catchUp();
  }

  // ── publishing ────────────────────────────────────────────────────────────────────────────────

  private async store(batch: Array<Pending<StorableEvent>>): Promise<void> {
    let outcomes: AppendOutcome[];
    try {
      outcomes = await this.log.append(this.sql, batch.map((p) => p.item));
    } catch (error) {
      // Only an outage or a missing table fails every event alike; anything else may be one
      // event's own fault (a value PostgreSQL refuses, a row over a limit): retry one by one.
      if (batch.length > 1 && !failsEveryEvent(error)) return this.storeOneByOne(batch);
      for (const pending of batch) pending.reject(this.publishError(pending.item.event, error));
      return;
    }
    const stored: string[] = [];
    batch.forEach((pending, i) => {
      if (this.settle(pending, outcomes[i] as AppendOutcome)) stored.push(pending.item.event.type);
    });
    if (stored.length > 0) this.wake(stored);
  }

  private async storeOneByOne(batch: Array<Pending<StorableEvent>>): Promise<void> {
    const stored: string[] = [];
    for (const [at, pending] of batch.entries()) {
      try {
        const [outcome] = await this.log.append(this.sql, [pending.item]);
        if (this.settle(pending, outcome as AppendOutcome)) stored.push(pending.item.event.type);
      } catch (error) {
        pending.reject(this.publishError(pending.item.event, error));
        // The database went away meanwhile: the rest would each wait out the same outage.
        if (failsEveryEvent(error)) {
          for (const rest of batch.slice(at + 1)) rest.reject(this.publishError(rest.item.event, error));
          break;
        }
      }
    }
    if (stored.length > 0) this.wake(stored);
  }

  /** Resolves or refuses one publish by its outcome; true when its row is new (someone must be woken). */
  private settle(pending: Pending<StorableEvent>, outcome: AppendOutcome): boolean {
    const { event } = pending.item;
    if (outcome === 'conflict') pending.reject(new EventIdConflictError(event.eventId, event.type));
    else pending.resolve();
    return outcome === 'stored';
  }

  private publishError(event: BusEvent, error: unknown): Error {
    const what = describeEvent(event);
    const code = errorCode(error);
    if (code === '42P01') return new MissingSchemaError('CycliumEvents1764400000002', 'table cyclium_events');
    if (isDatabaseUnavailable(error)) return new DatabaseUnavailableError(`bus: could not store ${what}`, error);
    // 22: a value PostgreSQL refuses; 54000: a row over one of its limits (an index row, say).
    if (code?.startsWith('22') || code === '54000') return new InvalidBusEventError(`bus: PostgreSQL refused ${what}: ${errorMessage(error)}`);
    return error instanceof Error ? error : new Error(String(error));
  }

  private hear({ wake, tokens, joined, notFor }: Heard): void {
    if (joined !== undefined && joined !== this.identity() && this.audience) {
      const wasAlone = this.audience.alone;
      this.audience.joined(joined);
      // What this node committed unannounced since the newcomer took its cursor: it reads that now.
      if (wasAlone) this.notifier.wake();
    }
    // A wake-up this node sent for events none of its handlers wants: the others read, it need not.
    if (wake && notFor !== this.identity()) this.reader.wake();
    if (tokens.length === 0) return;
    for (const handler of this.signalHandlers) handler(tokens);
  }

  // ── retention ─────────────────────────────────────────────────────────────────────────────────

  /** Deletes events past the retention window now, in batches; also runs on a timer. Resolves with the count. */
  async pruneNow(): Promise<number> {
    let total = 0;
    let undispatched = 0;
    for (let pass = 0; pass < PRUNE_BATCHES_PER_PASS; pass++) {
      const pruned = await this.log.prune(this.sql, this.retentionMs, this.undispatchedMaxAgeMs, PRUNE_BATCH);
      total += pruned.deleted;
      undispatched += pruned.undispatched;
      if (pruned.deleted < PRUNE_BATCH) break;
    }
    if (undispatched > 0) {
      this.undispatchedPruned += undispatched;
      this.logger.warn(
        `deleted ${undispatched} event(s) older than busUndispatchedMaxAgeMs (${this.undispatchedMaxAgeMs} ms) that a consumer ` +
          `had not dispatched: no node hosting it read them in time (see cyclium_bus_positions)`,
      );
    }
    return total;
  }

  private prune(): void {
    this.pruning ??= this.pruneNow()
      .then(
        () => this.pruneOutage.succeeded(),
        (error: unknown) => this.pruneOutage.failed(error),
      )
      .finally(() => (this.pruning = undefined));
  }
}

/**
 * Serialises an event's payload now, so a payload PostgreSQL cannot store fails its own publish
 * with a reason rather than a batch later (text columns refuse NUL too).
 */
export function storableEvent(event: BusEvent): StorableEvent {
  const what = describeEvent(event);
  const payload = toJsonb(event.payload);
  if ('problem' in payload) throw new InvalidBusEventError(`bus: the payload of ${what} ${payload.problem}; remove it`, 'payload');
  for (const field of ['type', 'eventId'] as const) {
    if (event[field].includes('\u0000')) {
      throw new InvalidBusEventError(`bus: the ${field} of ${what} holds a NUL character, which PostgreSQL cannot store`, field);
    }
  }
  return { event, payloadJson: payload.json };
}

/** An outage or a missing table: what no event of a batch can get past, so retrying them one by one is no use. */
function failsEveryEvent(error: unknown): boolean {
  return isDatabaseUnavailable(error) || errorCode(error) === '42P01';
}

/** How errors name an event: its id (quoted, and cut short when long) and type. */
function describeEvent(event: BusEvent): string {
  const id = event.eventId.length > 80 ? `${event.eventId.slice(0, 80)}…` : event.eventId;
  return `event ${JSON.stringify(id)} ("${event.type}")`;
}

function roundOrNull(value: number | null): number | null {
  return value === null ? null : Math.round(value);
}
