import { Type } from 'class-transformer';
import {
  IsIn,
  IsInt,
  IsOptional,
  IsString,
  IsObject,
  IsUUID,
  Length,
  Max,
  Min,
  ValidateIf,
} from 'class-validator';
import { EPISODE_STATUSES, type EpisodeStatus } from '../entities/episode.entity.js';
import { MAX_STATUS_WINDOW_MS } from '../health/cluster-status.service.js';
import { MAX_HISTORY_MINUTES } from '../health/finished-history.service.js';
import type { CycliumMode } from '../options/cyclium-options.interface.js';
import { MODES } from '../options/options.schema.js';

const TRIGGER_REQUEST_STATUSES = [
  'pending',
  'scheduled',
  'claimed',
  'completed',
  'expired',
  'failed',
] as const;
const WORKFLOW_STATUSES = ['running', 'blocked', 'done', 'failed', 'canceled'] as const;

/** The statuses `retry-matching` acts on: only a failed episode can be retried. */
export const RETRYABLE_STATUSES = [
  'failed',
  'partially_failed',
] as const satisfies readonly EpisodeStatus[];

/** The statuses `cancel-matching` acts on: those of an episode that has not ended. */
export const CANCELABLE_STATUSES = [
  'queued',
  'throttled',
  'deferred',
  'waiting',
  'running',
  'blocked',
] as const satisfies readonly EpisodeStatus[];

const WholeLimit = () => (target: object, key: string) => {
  IsInt({ message: `${key} must be a whole number from 1 to 500` })(target, key);
  Min(1, { message: `${key} must be a whole number from 1 to 500` })(target, key);
  Max(500, { message: `${key} must be a whole number from 1 to 500` })(target, key);
};

/** Query strings arrive as text: a number field is converted first, then checked. */
const Limit = () => (target: object, key: string) => {
  Type(() => Number)(target, key);
  WholeLimit()(target, key);
};

/**
 * A body field that may be left out. Unlike IsOptional, null is refused: read as "no filter", a
 * `"actor": null` would widen a bulk action to every actor.
 */
const Absent = () => ValidateIf((_body: object, value: unknown) => value !== undefined);

const Text = (max: number) => (target: object, key: string) => {
  IsString({ message: `${key} must be text` })(target, key);
  Length(1, max, { message: `${key} must be 1 to ${max} characters` })(target, key);
};

/** Why an operator acts: logged with the episode's id (`reason`, 1 to 500 characters). */
const Reason = () => (target: object, key: string) => {
  Absent()(target, key);
  Text(500)(target, key);
};

/** A year, the longest `delayMs` a start from the page takes (longer is a typing mistake). */
const YEAR_MS = 31_536_000_000;

/**
 * `POST /api/episodes/start`: an expectation this node declares, its payload (a JSON object,
 * default `{}`), and optionally a dedupe key and a delay.
 */
export class StartEpisodeBody {
  @Text(200)
  actorId!: string;

  @Text(200)
  expectationId!: string;

  @Absent()
  @IsObject({ message: 'payload must be a JSON object' })
  payload?: Record<string, unknown>;

  @Absent()
  @Text(1000)
  dedupeKey?: string;

  @Absent()
  @IsInt({ message: `delayMs must be a whole number of milliseconds from 0 to ${YEAR_MS}` })
  @Min(0, { message: `delayMs must be a whole number of milliseconds from 0 to ${YEAR_MS}` })
  @Max(YEAR_MS, { message: `delayMs must be a whole number of milliseconds from 0 to ${YEAR_MS}` })
  delayMs?: number;

  @Reason()
  reason?: string;
}

export class EpisodeIdParam {
  @IsUUID('all', { message: 'id must be a UUID' })
  id!: string;
}

export class WorkflowIdParam extends EpisodeIdParam {}

export class ActorIdParam {
  @Text(200)
  actorId!: string;
}

/** `POST /api/episodes/:id/signal`: the signal's name and its payload (any JSON; default null). */
export class SignalBody {
  @Text(200)
  name!: string;

  @IsOptional()
  payload?: unknown;
}

/** `POST /api/versions/move`: the expectation, and the versions to move its episodes between. */
export class MoveVersionBody {
  @Text(200)
  actorId!: string;

  @Text(200)
  expectationId!: string;

  @Text(100)
  from!: string;

  @Text(100)
  to!: string;
}

export class ClusterQuery {
  @IsOptional()
  @Type(() => Number)
  @IsInt({
    message: `windowMs must be a whole number of milliseconds from 1 to ${MAX_STATUS_WINDOW_MS}`,
  })
  @Min(1, {
    message: `windowMs must be a whole number of milliseconds from 1 to ${MAX_STATUS_WINDOW_MS}`,
  })
  @Max(MAX_STATUS_WINDOW_MS, {
    message: `windowMs must be a whole number of milliseconds from 1 to ${MAX_STATUS_WINDOW_MS}`,
  })
  windowMs?: number;
}

const MINUTES = `minutes must be a whole number from 1 to ${MAX_HISTORY_MINUTES}`;

/** `GET /api/history`: how many minutes back, the one under way included (default 60). */
export class HistoryQuery {
  @IsOptional()
  @Type(() => Number)
  @IsInt({ message: MINUTES })
  @Min(1, { message: MINUTES })
  @Max(MAX_HISTORY_MINUTES, { message: MINUTES })
  minutes?: number;
}

export class EpisodeListQuery {
  @IsOptional()
  @Text(200)
  actor?: string;

  @IsOptional()
  @IsIn(EPISODE_STATUSES, { message: `status must be one of: ${EPISODE_STATUSES.join(', ')}` })
  status?: EpisodeStatus;

  @IsOptional()
  @Text(200)
  stack?: string;

  @IsOptional()
  @Text(200)
  env?: string;

  @IsOptional()
  @Text(200)
  eventId?: string;

  @IsOptional()
  @Text(1000)
  dedupeKey?: string;

  @IsOptional()
  @Limit()
  limit?: number;

  @IsOptional()
  @Text(400)
  cursor?: string;
}

/** `POST /api/episodes/:id/cancel|retry|archive`: an optional body saying why. */
export class OperatorActionBody {
  @Reason()
  reason?: string;
}

/**
 * The filters of `GET /api/episodes` as a JSON body, how many matching episodes one call acts on
 * (`limit`, default 100), and why. The status filter is each action's own: only the statuses it can
 * act on.
 */
abstract class MatchingBody extends OperatorActionBody {
  @Absent()
  @Text(200)
  actor?: string;

  @Absent()
  @Text(200)
  stack?: string;

  @Absent()
  @Text(200)
  env?: string;

  @Absent()
  @Text(200)
  eventId?: string;

  @Absent()
  @WholeLimit()
  limit?: number;
}

/** `POST /api/episodes/retry-matching`. */
export class RetryMatchingBody extends MatchingBody {
  @Absent()
  @IsIn(RETRYABLE_STATUSES, {
    message:
      `status must be one of: ${RETRYABLE_STATUSES.join(', ')} ` +
      `(only a failed episode can be retried)`,
  })
  status?: (typeof RETRYABLE_STATUSES)[number];
}

/** `POST /api/episodes/cancel-matching`. */
export class CancelMatchingBody extends MatchingBody {
  @Absent()
  @IsIn(CANCELABLE_STATUSES, {
    message:
      `status must be one of: ${CANCELABLE_STATUSES.join(', ')} ` +
      `(only an episode that has not ended can be canceled)`,
  })
  status?: (typeof CANCELABLE_STATUSES)[number];
}

export class TriggerRequestListQuery {
  @IsOptional()
  @IsIn(TRIGGER_REQUEST_STATUSES, {
    message: `status must be one of: ${TRIGGER_REQUEST_STATUSES.join(', ')}`,
  })
  status?: (typeof TRIGGER_REQUEST_STATUSES)[number];

  @IsOptional()
  @Limit()
  limit?: number;
}

export class WorkflowListQuery {
  @IsOptional()
  @IsIn(WORKFLOW_STATUSES, { message: `status must be one of: ${WORKFLOW_STATUSES.join(', ')}` })
  status?: (typeof WORKFLOW_STATUSES)[number];

  @IsOptional()
  @Limit()
  limit?: number;
}

/** `GET /api/flow`: how many keys each limited expectation lists (its busiest; default 50). */
export class FlowQuery {
  @IsOptional()
  @Limit()
  keys?: number;
}

export class BusConsumerBody {
  @Text(63)
  channel!: string;

  @Text(500)
  consumer!: string;
}

export class ModeBody {
  @IsIn(MODES, { message: `mode must be one of: ${MODES.join(', ')}` })
  mode!: CycliumMode;
}
