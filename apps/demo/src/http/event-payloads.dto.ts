import { plainToInstance } from 'class-transformer';
import {
  IsInt,
  IsNotEmpty,
  IsNumber,
  IsOptional,
  IsString,
  Min,
  validateSync,
} from 'class-validator';
import { firstProblem } from './validated-body.pipe.js';

/** An optional whole number of at least `min`, its message naming the field. */
const OptionalWhole = (min: number) => (target: object, key: string) => {
  const message = `${key} must be a whole number${min > 0 ? ` from ${min}` : ' >= 0'}`;
  IsOptional()(target, key);
  IsInt({ message })(target, key);
  Min(min, { message })(target, key);
};

/** `resource.updated`, as the monitor reads it (ResourceUpdated). */
export class ResourceUpdatedPayload {
  @IsString({ message: 'resource must be a non-empty string' })
  @IsNotEmpty({ message: 'resource must be a non-empty string' })
  resource!: string;

  @IsNumber({ allowNaN: false, allowInfinity: false }, { message: 'usage must be a number' })
  usage!: number;

  @IsOptional()
  @IsNumber({ allowNaN: false, allowInfinity: false }, { message: 'limit must be a number' })
  limit?: number;
}

/** `resource.rebalance` and its `_once` and `_retried` forms, as the rebalancer reads them. */
export class RebalancePayload {
  @IsString({ message: 'resource must be a non-empty string' })
  @IsNotEmpty({ message: 'resource must be a non-empty string' })
  resource!: string;

  @OptionalWhole(0)
  stepMs?: number;

  @OptionalWhole(0)
  sleepMs?: number;

  @OptionalWhole(0)
  slowStepMs?: number;

  @OptionalWhole(0)
  steps?: number;

  @OptionalWhole(1)
  failAtStep?: number;

  @OptionalWhole(1)
  failTimes?: number;

  @OptionalWhole(1)
  slowAtStep?: number;

  @OptionalWhole(1)
  ignoreAbortAtStep?: number;

  @IsOptional()
  @IsString({ message: 'outputKey must be a string' })
  outputKey?: string;
}

/** The event types the demo's actors subscribe to, and the payload each reads. */
const EVENT_PAYLOADS: Readonly<Record<string, new () => object>> = {
  'resource.updated': ResourceUpdatedPayload,
  'resource.rebalance': RebalancePayload,
  'resource.rebalance_once': RebalancePayload,
  'resource.rebalance_retried': RebalancePayload,
};

/**
 * What is wrong with an event's payload, or undefined: every payload is a JSON object, and one of a
 * type the demo subscribes to carries the fields its actor reads (more fields are the publisher's
 * own, and kept). The bus itself stores any JSON; the demo refuses what its actors could only
 * misread ("undefined at undefined%").
 */
export function eventPayloadProblem(
  type: string,
  payload: unknown,
): { field: string; message: string } | undefined {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload))
    return { field: 'payload', message: 'payload must be a JSON object' };
  const shape = EVENT_PAYLOADS[type];
  if (!shape) return undefined;
  return firstProblem(validateSync(plainToInstance(shape, payload)), 'payload.');
}
