import {
  Allow,
  IsDateString,
  IsInt,
  IsNotEmpty,
  IsObject,
  IsOptional,
  IsString,
  Min,
} from 'class-validator';

/** `POST /events`. */
export class PublishEventBody {
  @IsString({ message: 'type must be a string' })
  type!: string;

  /** Any JSON; the bus says what it cannot store. */
  @Allow()
  payload?: unknown;

  @IsOptional()
  @IsString({ message: 'eventId must be a non-empty string' })
  @IsNotEmpty({ message: 'eventId must be a non-empty string' })
  eventId?: string;
}

/** `POST /actors/:actorId/:expectationId`. */
export class TriggerBody {
  @IsOptional()
  @IsObject({ message: 'payload must be an object' })
  payload?: Record<string, unknown>;

  @IsOptional()
  @IsString({ message: 'dedupeKey must be a non-empty string' })
  @IsNotEmpty({ message: 'dedupeKey must be a non-empty string' })
  dedupeKey?: string;

  @IsOptional()
  @IsInt({ message: 'delayMs must be a whole number of milliseconds >= 0' })
  @Min(0, { message: 'delayMs must be a whole number of milliseconds >= 0' })
  delayMs?: number;

  @IsOptional()
  @IsDateString({ strict: true }, { message: 'runAt must be an ISO 8601 date and time' })
  runAt?: string;
}

/** `POST /mode`; the modes themselves are checked by `Mode`, which names the allowed ones. */
export class ModeChangeBody {
  @IsOptional()
  @IsString({ message: 'mode must be one of: full, trigger_only, disabled' })
  mode?: string;

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
