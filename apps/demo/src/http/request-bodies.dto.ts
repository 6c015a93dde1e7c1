import {
  Allow,
  IsDateString,
  IsIn,
  IsInt,
  IsNotEmpty,
  IsObject,
  IsOptional,
  IsString,
  Max,
  Min,
  ValidateIf,
} from 'class-validator';

/** The longest a demo trigger may be put off: `delayMs` and `runAt` up to a year from now. */
export const MAX_DELAY_MS = 365 * 24 * 3_600_000;
/** The modes `POST /mode` takes, for the node and per actor. */
export const MODES = ['full', 'trigger_only', 'disabled'] as const;
const MODE_MESSAGE = `mode must be one of: ${MODES.join(', ')}`;
const DELAY_MESSAGE = `delayMs must be a whole number of milliseconds from 0 to ${MAX_DELAY_MS} (a year)`;

/** `POST /events`. */
export class PublishEventBody {
  @IsString({ message: 'type must be a string' })
  type!: string;

  /** A JSON object (eventPayloadProblem); the bus says what it cannot store. */
  @Allow()
  payload?: unknown;

  @IsOptional()
  @IsString({ message: 'eventId must be a non-empty string' })
  @IsNotEmpty({ message: 'eventId must be a non-empty string' })
  eventId?: string;
}

/** `POST /actors/:actorId/:expectationId`. */
export class TriggerBody {
  @ValidateIf((body: TriggerBody) => body.payload !== undefined)
  @IsObject({ message: 'payload must be a JSON object' })
  payload?: Record<string, unknown>;

  @IsOptional()
  @IsString({ message: 'dedupeKey must be a non-empty string' })
  @IsNotEmpty({ message: 'dedupeKey must be a non-empty string' })
  dedupeKey?: string;

  @IsOptional()
  @IsInt({ message: DELAY_MESSAGE })
  @Min(0, { message: DELAY_MESSAGE })
  @Max(MAX_DELAY_MS, { message: DELAY_MESSAGE })
  delayMs?: number;

  @IsOptional()
  @IsDateString({ strict: true }, { message: 'runAt must be an ISO 8601 date and time' })
  runAt?: string;
}

/** `POST /mode`; the overrides' actors and modes are checked by the controller, per field. */
export class ModeChangeBody {
  @IsOptional()
  @IsIn(MODES, { message: MODE_MESSAGE })
  mode?: (typeof MODES)[number];

  /** Per actor: a mode, or null to clear its override. */
  @IsOptional()
  @IsObject({ message: 'overrides must be an object of actor id to mode (or null to clear)' })
  overrides?: Record<string, string | null>;
}

/** `POST /workflows/:workflowId`. */
export class StartWorkflowBody {
  @IsObject({ message: 'input must be an object' })
  input!: Record<string, unknown>;

  @IsOptional()
  @IsString({ message: 'subject must be a string' })
  subject?: string;
}
