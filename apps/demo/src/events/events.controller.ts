import {
  BadRequestException,
  Body,
  ConflictException,
  Controller,
  HttpCode,
  PayloadTooLargeException,
  Post,
} from '@nestjs/common';
import {
  Bus,
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
} from '@cyclium/nestjs';

import { eventPayloadProblem } from '../http/event-payloads.dto.js';
import { PublishEventBody } from '../http/request-bodies.dto.js';
import { validatedBody } from '../http/validated-body.pipe.js';

/**
 * `POST /events { type, payload, eventId? }` publishes on the cluster bus from any node. 202 means
 * the event is stored: it becomes one episode per expectation that subscribes to it, even if every
 * node stops right after (the next node to boot catches up from the bus positions). A publish is
 * stored or refused, never dropped:
 * - 400 naming the `field` for a payload that is not a JSON object or lacks what the type's
 *   subscriber reads (`payload.usage`), and for an event the bus refuses (a reserved type, a type
 *   or eventId over 200 characters, a payload PostgreSQL cannot store);
 * - 413 for a payload over the bus's limit (1 MiB of JSON unless DEMO_BUS_MAX_PAYLOAD_BYTES says);
 * - 409 for an eventId already stored with another type or payload (an identical retry is 202);
 * - 503 with `Retry-After` while the database is away or this node already holds as many publishes
 *   as it may (retry with the same eventId: a repeated id is stored once).
 */
@Controller('events')
export class EventsController {
  constructor(private readonly bus: Bus) {}

  @Post()
  @HttpCode(202)
  async publish(@Body(validatedBody()) body: PublishEventBody) {
    const payload = body.payload === undefined ? {} : body.payload;
    const problem = eventPayloadProblem(body.type, payload);
    if (problem) throw new BadRequestException({ statusCode: 400, ...problem });
    try {
      const event = await this.bus.publish(body.type, payload, {
        eventId: body.eventId,
      });
      return { eventId: event.eventId, type: event.type };
    } catch (error) {
      if (error instanceof EventPayloadTooLargeError) {
        throw new PayloadTooLargeException({
          statusCode: 413,
          message: error.message,
          field: error.field,
          limitBytes: error.limitBytes,
        });
      }
      if (error instanceof InvalidBusEventError)
        throw new BadRequestException({
          statusCode: 400,
          message: error.message,
          field: error.field,
        });
      if (error instanceof EventIdConflictError)
        throw new ConflictException({ statusCode: 409, message: error.message, field: 'eventId' });
      // DatabaseUnavailableError, PublishQueueFullError included: the global filter answers 503.
      throw error;
    }
  }
}
