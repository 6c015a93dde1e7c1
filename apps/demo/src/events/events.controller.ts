import { BadRequestException, Body, Controller, HttpCode, Post } from '@nestjs/common';
import { Bus } from '@cyclium/nestjs';

interface PublishRequest {
  type?: unknown;
  payload?: unknown;
  eventId?: unknown;
}

/** `POST /events { type, payload, eventId? }` publishes on the cluster bus from any node. */
@Controller('events')
export class EventsController {
  constructor(private readonly bus: Bus) {}

  @Post()
  @HttpCode(202)
  async publish(@Body() body: PublishRequest) {
    if (typeof body?.type !== 'string' || body.type === '' || body.type === '*') {
      throw new BadRequestException('type must be a non-empty string other than "*"');
    }
    if (body.eventId !== undefined && (typeof body.eventId !== 'string' || body.eventId === '')) {
      throw new BadRequestException('eventId must be a non-empty string');
    }
    const event = await this.bus.publish(body.type, body.payload ?? {}, { eventId: body.eventId });
    return { eventId: event.eventId, type: event.type };
  }
}
