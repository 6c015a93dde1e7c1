/**
 * Compile-time check, run by `tsc -p test/tsconfig.test.json` in `npm test`: a host can map every
 * way a publish is refused to an HTTP answer from the package's own exports, fields typed.
 */
import {
  DatabaseUnavailableError,
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
  PublishQueueFullError,
  type BusEventField,
  type CycliumOptions,
} from '@cyclium/nestjs';
import { MAX_EVENT_ID_CHARS } from '@cyclium/nestjs/adapters';

export function statusOf(error: unknown): {
  status: number;
  field?: BusEventField;
  detail?: string;
} {
  if (error instanceof EventPayloadTooLargeError)
    return {
      status: 413,
      field: error.field,
      detail: `${error.bytes} > ${error.limitBytes} bytes`,
    };
  if (error instanceof InvalidBusEventError) return { status: 400, field: error.field };
  if (error instanceof EventIdConflictError)
    return { status: 409, field: 'eventId', detail: `${error.eventId} (${error.type})` };
  if (error instanceof PublishQueueFullError)
    return { status: 503, detail: `${error.limit} publishes waiting` };
  if (error instanceof DatabaseUnavailableError) return { status: 503 };
  return { status: 500 };
}

export const limits: CycliumOptions = { busPublishQueueMax: 500, busMaxPayloadBytes: 64 * 1024 };

export const idFits = (id: string): boolean => id.length <= MAX_EVENT_ID_CHARS;

// @ts-expect-error the refused field is one of the event's own
export const notAField: BusEventField = 'publishedAt';
