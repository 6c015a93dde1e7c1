import { DatabaseUnavailableError } from '../sql/database-errors.js';

/** The part of an event a refusal is about. */
export type BusEventField = 'type' | 'eventId' | 'payload';

/**
 * An event the bus refuses to publish, with the reason; nothing was sent. The caller's mistake (a
 * 400).
 */
export class InvalidBusEventError extends TypeError {
  override readonly name: string = 'InvalidBusEventError';

  constructor(
    message: string,
    /** The field at fault, when one is (an HTTP layer can name it back to its client). */
    readonly field?: BusEventField,
  ) {
    super(message);
  }
}

/**
 * The payload serialises to more bytes than the bus takes (`busMaxPayloadBytes`); nothing was sent.
 * A 413.
 */
export class EventPayloadTooLargeError extends InvalidBusEventError {
  override readonly name: string = 'EventPayloadTooLargeError';

  constructor(
    message: string,
    readonly bytes: number,
    readonly limitBytes: number,
  ) {
    super(message, 'payload');
  }
}

/**
 * The event id is already stored on this channel (this stack and env) with another type or
 * payload. The stored event is unchanged and this one was not stored: ids name one event, so a
 * second meaning under the same id would be lost silently. An identical retry is not a conflict.
 * A 409.
 */
export class EventIdConflictError extends Error {
  override readonly name: string = 'EventIdConflictError';

  constructor(
    readonly eventId: string,
    readonly type: string,
  ) {
    super(
      `bus: event id ${JSON.stringify(eventId)} is already stored with another type or payload; ` +
        `"${type}" was not stored (use a new id for a new event)`,
    );
  }
}

/**
 * Backpressure: this node already holds `busPublishQueueMax` publishes waiting for the database,
 * so this one was refused at once rather than queued in memory. Nothing was stored; retry later.
 * A DatabaseUnavailableError, so callers that answer 503 for an outage answer it here too.
 */
export class PublishQueueFullError extends DatabaseUnavailableError {
  override readonly name: string = 'PublishQueueFullError';

  constructor(
    readonly limit: number,
    what: string,
  ) {
    super(`bus: could not queue ${what}`, new Error('publish queue full'));
    this.message =
      `bus: ${limit} publishes are already waiting for the database (busPublishQueueMax); ` +
      `${what} was refused, retry later`;
  }
}
