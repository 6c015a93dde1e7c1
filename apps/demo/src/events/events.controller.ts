import { BadRequestException, Body, Controller, HttpCode, Post } from '@nestjs/common';
import { Bus, InvalidBusEventError } from '@cyclium/nestjs';

interface PublishRequest {
  type?: unknown;
  payload?: unknown;
  eventId?: unknown;
}

/**
 * `POST /events { type, payload, eventId? }` publishes on the cluster bus from any node. 202 means
 * the event is stored: every node will see it. 400 for an event the bus refuses (a reserved type,
 * a payload PostgreSQL cannot store); 503 while the database is away (retry with the same eventId:
 * a repeated id is stored once).
 */
@Controller('events')
export class EventsController {
  constructor(private readonly bus: Bus) {}

  @Post()
  @HttpCode(202)
  async publish(@Body() body: PublishRequest) {
    if (typeof body?.type !== 'string') throw new BadRequestException('type must be a string');
    if (body.eventId !== undefined && (typeof body.eventId !== 'string' || body.eventId === '')) {
      throw new BadRequestException('eventId must be a non-empty string');
    }
    try {
      const event = await this.bus.publish(body.type, body.payload ?? {}, { eventId: body.eventId });
      return { eventId: event.eventId, type: event.type };
    } catch (error) {
      if (error instanceof InvalidBusEventError) throw new BadRequestException(error.message);
      throw error;
    }
  }
}
