import {
  DatabaseUnavailableError,
  errorCode,
  errorMessage,
  isDatabaseTimeout,
  isDatabaseUnavailable,
} from '../sql/database-errors.js';
import { toJsonb } from '../sql/jsonb.js';
import { MissingSchemaError } from '../sql/missing-schema.error.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { EventIdConflictError, InvalidBusEventError, PublishQueueFullError } from './bus-errors.js';
import type { BusEvent, PublishOptions } from './bus.interface.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  MAX_PAYLOAD_BYTES,
  assertPayloadSize,
  assertStoredSize,
} from './event-bounds.js';
import type { AppendOutcome, StorableEvent } from './event-appender.js';
import type { EventLog } from './event-log.js';
import { GroupCommit, type Pending } from '../primitives/group-commit.js';
import { mintBusEvent } from './local-bus.js';

const DEFAULT_QUEUE_MAX = 10_000;

export interface EventPublisherOptions {
  /**
   * Refuse a payload whose JSON is longer than this many bytes: 1 to MAX_PAYLOAD_BYTES (2 MiB).
   * Default 1 MiB.
   */
  maxPayloadBytes?: number;
  /**
   * At most this many publishes wait in memory for the database; one more is refused at once.
   * Default 10 000.
   */
  queueMax?: number;
}

/**
 * A publish is stored or refused, never dropped: the event is minted and bounded before anything
 * is queued, the queue of publishes waiting for the database is bounded, and publishes are
 * group-committed (one statement per batch, the first at once, the rest coalesced while it is in
 * flight). One bad event in a batch fails only its own publish.
 */
export class EventPublisher {
  private readonly outbox: GroupCommit<StorableEvent>;
  private readonly maxPayloadBytes: number;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly log: EventLog,
    /** Called with the types of the rows a batch stored, once it has committed. */
    private readonly stored: (types: readonly string[]) => void,
    options: EventPublisherOptions = {},
  ) {
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    if (!(this.maxPayloadBytes >= 1 && this.maxPayloadBytes <= MAX_PAYLOAD_BYTES)) {
      throw new TypeError(
        `bus: maxPayloadBytes must be from 1 to ${MAX_PAYLOAD_BYTES} (got ${this.maxPayloadBytes})`,
      );
    }
    const queueMax = options.queueMax ?? DEFAULT_QUEUE_MAX;
    this.outbox = new GroupCommit((batch) => this.store(batch), 1, {
      max: queueMax,
      refuse: (item) => new PublishQueueFullError(queueMax, describeEvent(item.event)),
    });
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    let storable: StorableEvent;
    try {
      storable = this.storable(type, payload, options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.outbox.add(storable).then(() => storable.event as BusEvent<P>);
  }

  /**
   * A publish through the caller's open transaction (the host's): bounded as `publish` is, stored
   * with one checked append on `client`, never queued.
   */
  async publishWithin<P>(
    client: SqlExecutor,
    type: string,
    payload: P,
    options?: PublishOptions,
  ): Promise<{ event: BusEvent<P>; stored: boolean }> {
    const storable = this.storable(type, payload, options);
    const [outcome] = await this.log.append(client, [storable]);
    if (outcome === 'conflict')
      throw new EventIdConflictError(storable.event.eventId, storable.event.type);
    return { event: storable.event as BusEvent<P>, stored: outcome === 'stored' };
  }

  /** The event minted and bounded, or the error that refuses it. */
  private storable(type: string, payload: unknown, options?: PublishOptions): StorableEvent {
    const storable = storableEvent(mintBusEvent(type, payload, options));
    assertPayloadSize(storable.payloadJson, this.maxPayloadBytes, describeEvent(storable.event));
    assertStoredSize(storable.payloadJson, describeEvent(storable.event));
    return storable;
  }

  /** Resolves once every publish asked for so far has been stored or refused. */
  idle(): Promise<void> {
    return this.outbox.idle();
  }

  private async store(batch: Array<Pending<StorableEvent>>): Promise<void> {
    let outcomes: AppendOutcome[];
    try {
      outcomes = await this.log.append(
        this.sql,
        batch.map((p) => p.item),
      );
    } catch (error) {
      // Only an outage or a missing table fails every event alike; anything else may be one
      // event's own fault (a value PostgreSQL refuses, a row over a limit): retry one by one.
      if (batch.length > 1 && !failsEveryEvent(error)) return this.storeOneByOne(batch);
      for (const pending of batch) pending.reject(this.publishError(pending.item.event, error));
      this.refuseQueuedAfterTimeout(error);
      return;
    }
    const stored: string[] = [];
    batch.forEach((pending, i) => {
      if (this.settle(pending, outcomes[i] as AppendOutcome)) stored.push(pending.item.event.type);
    });
    if (stored.length > 0) this.stored(stored);
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
          for (const rest of batch.slice(at + 1))
            rest.reject(this.publishError(rest.item.event, error));
          this.refuseQueuedAfterTimeout(error);
          break;
        }
      }
    }
    if (stored.length > 0) this.stored(stored);
  }

  /**
   * Publishes queued behind a statement that met the library's timeout would each wait out the
   * same bound again before their own statement even starts: they are refused now (nothing of
   * theirs was sent), so every publish answers within one checkout + query timeout.
   */
  private refuseQueuedAfterTimeout(error: unknown): void {
    if (!isDatabaseTimeout(error)) return;
    for (const queued of this.outbox.takeQueued()) {
      queued.reject(
        new DatabaseUnavailableError(
          `bus: did not store ${describeEvent(queued.item.event)} (the publish ahead of it timed ` +
            `out)`,
          error,
        ),
      );
    }
  }

  /**
   * Resolves or refuses one publish by its outcome; true when its row is new (someone must be
   * woken).
   */
  private settle(pending: Pending<StorableEvent>, outcome: AppendOutcome): boolean {
    const { event } = pending.item;
    if (outcome === 'conflict') pending.reject(new EventIdConflictError(event.eventId, event.type));
    else pending.resolve();
    return outcome === 'stored';
  }

  private publishError(event: BusEvent, error: unknown): Error {
    const what = describeEvent(event);
    const code = errorCode(error);
    if (code === '42P01')
      return new MissingSchemaError('CycliumEvents1764400000002', 'table cyclium_events');
    if (isDatabaseUnavailable(error))
      return new DatabaseUnavailableError(`bus: could not store ${what}`, error);
    // 22: a value PostgreSQL refuses; 54000: a row over one of its limits (an index row, say).
    if (code?.startsWith('22') || code === '54000')
      return new InvalidBusEventError(`bus: PostgreSQL refused ${what}: ${errorMessage(error)}`);
    return error instanceof Error ? error : new Error(String(error));
  }
}

/**
 * An event the library writes itself (a lifecycle event, a wake-up, in its own transactions),
 * bounded as a host's publish is by the most any node may take (MAX_PAYLOAD_BYTES, and a read's
 * worth of jsonb text), whatever `busMaxPayloadBytes` says: a host's tighter limit is for its own
 * events.
 */
export function boundedEvent(event: BusEvent): StorableEvent {
  const storable = storableEvent(event);
  assertPayloadSize(storable.payloadJson, MAX_PAYLOAD_BYTES, describeEvent(event));
  assertStoredSize(storable.payloadJson, describeEvent(event));
  return storable;
}

/**
 * Serialises an event's payload now, so a payload PostgreSQL cannot store fails its own publish
 * with a reason rather than a batch later (text columns refuse NUL too).
 */
export function storableEvent(event: BusEvent): StorableEvent {
  const what = describeEvent(event);
  const payload = toJsonb(event.payload);
  if ('problem' in payload)
    throw new InvalidBusEventError(
      `bus: the payload of ${what} ${payload.problem}; remove it`,
      'payload',
    );
  for (const field of ['type', 'eventId'] as const) {
    if (event[field].includes('\u0000')) {
      throw new InvalidBusEventError(
        `bus: the ${field} of ${what} holds a NUL character, which PostgreSQL cannot store`,
        field,
      );
    }
  }
  return { event, payloadJson: payload.json };
}

/**
 * An outage or a missing table: what no event of a batch can get past, so retrying them one by one
 * is no use.
 */
function failsEveryEvent(error: unknown): boolean {
  return isDatabaseUnavailable(error) || errorCode(error) === '42P01';
}

/** How errors name an event: its id (quoted, and cut short when long) and type. */
function describeEvent(event: BusEvent): string {
  const id = event.eventId.length > 80 ? `${event.eventId.slice(0, 80)}…` : event.eventId;
  return `event ${JSON.stringify(id)} ("${event.type}")`;
}
