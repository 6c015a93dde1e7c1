import {
  IsBoolean,
  IsIn,
  IsInt,
  IsOptional,
  IsString,
  Max,
  Min,
  ValidateBy,
  ValidateIf,
  ValidateNested,
} from 'class-validator';
import type { CycliumMode } from './cyclium-options.interface.js';
import { MAX_PAYLOAD_BYTES } from '../bus/event-bounds.js';
import { MAX_TIMER_MS, MAX_WINDOW_MS } from '../primitives/time-limits.js';
import {
  IsIntegrityOptions,
  IsNonEmptyStringOrFunction,
  IsPositiveNumber,
  IsPostgresUrl,
  OneOfOr,
} from './option-validators.js';

export const MODES: readonly CycliumMode[] = ['full', 'trigger_only', 'disabled'];

const CLAIM_ADAPTER_METHODS = [
  'acquire',
  'renew',
  'complete',
  'fail',
  'owns',
  'reclaimExpired',
] as const;
const BUS_METHODS = ['publish', 'subscribe'] as const;

const defined = (field: string) =>
  ValidateIf((o: Record<string, unknown>) => o[field] !== undefined);

const nonNegativeMs = (field: string) => ({
  message: `${field} must be a whole number of milliseconds >= 0`,
});
const positiveMs = (field: string) => ({
  message: `${field} must be a whole number of milliseconds >= 1`,
});
/** A nullable period: `orNull` says what null means. */
const positiveMsOrNull = (field: string, orNull: string) => ({
  message: `${field} must be a whole number of milliseconds >= 1, or null ${orNull}`,
});
const stringOrNull = (field: string) => ({ message: `${field} must be a string or null` });
const payloadBytes = {
  message: `busMaxPayloadBytes must be a whole number of bytes from 1 to ${MAX_PAYLOAD_BYTES}`,
};

const TIMER_LIMIT = `${MAX_TIMER_MS} ms (about 24.8 days)`;
const WINDOW_LIMIT = `${MAX_WINDOW_MS} ms (100 years)`;
const MAX_LEASE_S = `${MAX_TIMER_MS / 1000} s (about 24.8 days)`;
/** A period a timer waits out (see MAX_TIMER_MS): a longer one would fire at once. */
const timerMax = (field: string) =>
  Max(MAX_TIMER_MS, { message: `${field} must be at most ${TIMER_LIMIT}` });
/** A window compared in SQL (see MAX_WINDOW_MS). */
const windowMax = (field: string) =>
  Max(MAX_WINDOW_MS, { message: `${field} must be at most ${WINDOW_LIMIT}` });

export class RecoveryOptionsSchema {
  @defined('onBoot')
  @IsBoolean({ message: 'recovery.onBoot must be true or false' })
  onBoot?: unknown;

  @defined('settleMs')
  @timerMax('recovery.settleMs')
  @IsInt(nonNegativeMs('recovery.settleMs'))
  @Min(0, nonNegativeMs('recovery.settleMs'))
  settleMs?: unknown;

  @defined('staleAfterMs')
  @windowMax('recovery.staleAfterMs')
  @IsInt(positiveMs('recovery.staleAfterMs'))
  @Min(1, positiveMs('recovery.staleAfterMs'))
  staleAfterMs?: unknown;

  @IsOptional()
  @timerMax('recovery.intervalMs')
  @IsInt(positiveMsOrNull('recovery.intervalMs', 'for boot only'))
  @Min(1, positiveMsOrNull('recovery.intervalMs', 'for boot only'))
  intervalMs?: unknown;

  @IsOptional()
  @windowMax('recovery.notHostedGraceMs')
  @IsInt(positiveMsOrNull('recovery.notHostedGraceMs', 'to never fail them'))
  @Min(1, positiveMsOrNull('recovery.notHostedGraceMs', 'to never fail them'))
  notHostedGraceMs?: unknown;

  @defined('resolvePolicy')
  @ValidateBy(
    { name: 'isFunction', validator: { validate: (v) => typeof v === 'function' } },
    { message: "recovery.resolvePolicy must be a function returning 'restart' or 'fail'" },
  )
  resolvePolicy?: unknown;
}

export class RetentionOptionsSchema {
  @defined('archiveAfter')
  @windowMax('retention.archiveAfter')
  @IsInt(positiveMs('retention.archiveAfter'))
  @Min(1, positiveMs('retention.archiveAfter'))
  archiveAfter?: unknown;

  @IsOptional()
  @windowMax('retention.deleteAfter')
  @IsInt(positiveMsOrNull('retention.deleteAfter', 'to keep archived episodes'))
  @Min(1, positiveMsOrNull('retention.deleteAfter', 'to keep archived episodes'))
  deleteAfter?: unknown;

  @defined('batchSize')
  @IsInt({ message: 'retention.batchSize must be a whole number between 1 and 100000' })
  @Min(1, { message: 'retention.batchSize must be a whole number between 1 and 100000' })
  @Max(100_000, { message: 'retention.batchSize must be a whole number between 1 and 100000' })
  batchSize?: unknown;

  @defined('intervalMs')
  @timerMax('retention.intervalMs')
  @IsInt(positiveMs('retention.intervalMs'))
  @Min(1, positiveMs('retention.intervalMs'))
  intervalMs?: unknown;
}

/**
 * The shape CycliumModule accepts. Validated with `whitelist` + `forbidNonWhitelisted`, so a
 * misspelt option fails boot instead of being silently ignored.
 */
export class CycliumOptionsSchema {
  @defined('nodeIdentity')
  @IsNonEmptyStringOrFunction({
    message: 'nodeIdentity must be a non-empty string or a function returning one',
  })
  nodeIdentity?: unknown;

  @defined('workClaims')
  @OneOfOr([false, 'postgres'], CLAIM_ADAPTER_METHODS, {
    message:
      `workClaims must be one of: false, 'postgres', or an object implementing ` +
      `WorkClaimsAdapter (${CLAIM_ADAPTER_METHODS.join(', ')})`,
  })
  workClaims?: unknown;

  @defined('workClaimsLeaseSeconds')
  // The renewer's timer runs at a third of the lease, the local deadline at the lease.
  @Max(MAX_TIMER_MS / 1000, { message: `workClaimsLeaseSeconds must be at most ${MAX_LEASE_S}` })
  @IsPositiveNumber({ message: 'workClaimsLeaseSeconds must be a number of seconds > 0' })
  workClaimsLeaseSeconds?: unknown;

  @defined('mode')
  @IsIn(MODES, { message: `mode must be one of: ${MODES.join(', ')}` })
  mode?: unknown;

  @IsOptional()
  @IsString(stringOrNull('stackSlug'))
  stackSlug?: unknown;

  @IsOptional()
  @IsString(stringOrNull('env'))
  env?: unknown;

  @defined('bus')
  @OneOfOr(['postgres', 'local'], BUS_METHODS, {
    message:
      `bus must be one of: 'postgres', 'local', or an object implementing Bus ` +
      `(${BUS_METHODS.join(', ')})`,
  })
  bus?: unknown;

  @defined('busPollIntervalMs')
  @timerMax('busPollIntervalMs')
  @IsInt(positiveMs('busPollIntervalMs'))
  @Min(1, positiveMs('busPollIntervalMs'))
  busPollIntervalMs?: unknown;

  @defined('busEchoIntervalMs')
  @timerMax('busEchoIntervalMs')
  @IsInt(nonNegativeMs('busEchoIntervalMs'))
  @Min(0, nonNegativeMs('busEchoIntervalMs'))
  busEchoIntervalMs?: unknown;

  @defined('busEchoTimeoutMs')
  @timerMax('busEchoTimeoutMs')
  @IsInt(positiveMs('busEchoTimeoutMs'))
  @Min(1, positiveMs('busEchoTimeoutMs'))
  busEchoTimeoutMs?: unknown;

  @defined('busRetentionMs')
  @windowMax('busRetentionMs')
  @IsInt(positiveMs('busRetentionMs'))
  @Min(1, positiveMs('busRetentionMs'))
  busRetentionMs?: unknown;

  @defined('busUndispatchedMaxAgeMs')
  @windowMax('busUndispatchedMaxAgeMs')
  @IsInt(positiveMs('busUndispatchedMaxAgeMs'))
  @Min(1, positiveMs('busUndispatchedMaxAgeMs'))
  busUndispatchedMaxAgeMs?: unknown;
  @defined('busPublishQueueMax')
  @IsInt({ message: 'busPublishQueueMax must be a whole number of publishes >= 1' })
  @Min(1, { message: 'busPublishQueueMax must be a whole number of publishes >= 1' })
  busPublishQueueMax?: unknown;

  // Every event must fit one read of the bus (4 MiB of payload text, jsonb printing up to 1.5 times
  // the JSON).
  @defined('busMaxPayloadBytes')
  @IsInt(payloadBytes)
  @Min(1, payloadBytes)
  @Max(MAX_PAYLOAD_BYTES, payloadBytes)
  busMaxPayloadBytes?: unknown;

  @defined('listenUrl')
  @IsPostgresUrl({
    message:
      "listenUrl must be a postgres:// or postgresql:// connection URL, with bus: 'postgres'",
  })
  listenUrl?: unknown;

  @defined('preparedStatements')
  @IsBoolean({ message: 'preparedStatements must be true or false' })
  preparedStatements?: unknown;

  @defined('jitterMs')
  @timerMax('jitterMs')
  @IsInt(nonNegativeMs('jitterMs'))
  @Min(0, nonNegativeMs('jitterMs'))
  jitterMs?: unknown;

  @defined('startedEvents')
  @IsBoolean({ message: 'startedEvents must be true or false' })
  startedEvents?: unknown;

  @defined('metrics')
  @IsBoolean({ message: 'metrics must be true or false' })
  metrics?: unknown;

  @defined('tracing')
  @IsBoolean({ message: 'tracing must be true or false' })
  tracing?: unknown;

  @defined('episodeShutdownMs')
  @timerMax('episodeShutdownMs')
  @IsInt(nonNegativeMs('episodeShutdownMs'))
  @Min(0, nonNegativeMs('episodeShutdownMs'))
  episodeShutdownMs?: unknown;

  @defined('recovery')
  @ValidateNested({ message: 'recovery must be an object' })
  recovery?: unknown;

  @defined('triggerPollIntervalMs')
  @timerMax('triggerPollIntervalMs')
  @IsInt(positiveMs('triggerPollIntervalMs'))
  @Min(1, positiveMs('triggerPollIntervalMs'))
  triggerPollIntervalMs?: unknown;

  @defined('triggerPollIdleIntervalMs')
  @timerMax('triggerPollIdleIntervalMs')
  @IsInt(positiveMs('triggerPollIdleIntervalMs'))
  @Min(1, positiveMs('triggerPollIdleIntervalMs'))
  triggerPollIdleIntervalMs?: unknown;

  @IsOptional()
  @IsString(stringOrNull('triggerPollSourceStack'))
  triggerPollSourceStack?: unknown;

  @IsOptional()
  @IsString(stringOrNull('triggerPollSourceEnv'))
  triggerPollSourceEnv?: unknown;

  @defined('triggerRequestTtlMs')
  @windowMax('triggerRequestTtlMs')
  @IsInt(positiveMs('triggerRequestTtlMs'))
  @Min(1, positiveMs('triggerRequestTtlMs'))
  triggerRequestTtlMs?: unknown;

  @defined('retention')
  @ValidateIf((o: Record<string, unknown>) => o['retention'] !== false)
  @ValidateNested({ message: 'retention must be an object, or false to keep every row' })
  retention?: unknown;

  @defined('dataSource')
  @IsString({ message: 'dataSource must be the name of a TypeORM DataSource' })
  dataSource?: unknown;

  @defined('checkoutTimeoutMs')
  @timerMax('checkoutTimeoutMs')
  @IsInt(positiveMs('checkoutTimeoutMs'))
  @Min(1, positiveMs('checkoutTimeoutMs'))
  checkoutTimeoutMs?: unknown;

  @defined('queryTimeoutMs')
  @timerMax('queryTimeoutMs')
  @IsInt(positiveMs('queryTimeoutMs'))
  @Min(1, positiveMs('queryTimeoutMs'))
  queryTimeoutMs?: unknown;

  @defined('startupWaitMs')
  @IsInt(nonNegativeMs('startupWaitMs'))
  @Min(0, nonNegativeMs('startupWaitMs'))
  startupWaitMs?: unknown;

  @defined('nodeBeatIntervalMs')
  @timerMax('nodeBeatIntervalMs')
  @IsInt(positiveMs('nodeBeatIntervalMs'))
  @Min(1, positiveMs('nodeBeatIntervalMs'))
  nodeBeatIntervalMs?: unknown;

  @defined('workflowEngine')
  @IsBoolean({ message: 'workflowEngine must be true or false' })
  workflowEngine?: unknown;

  @defined('deliveryTimeoutMs')
  @timerMax('deliveryTimeoutMs')
  @IsInt(positiveMs('deliveryTimeoutMs'))
  @Min(1, positiveMs('deliveryTimeoutMs'))
  deliveryTimeoutMs?: unknown;

  @defined('outputMaxAttempts')
  @IsInt({ message: 'outputMaxAttempts must be a whole number >= 1' })
  @Min(1, { message: 'outputMaxAttempts must be a whole number >= 1' })
  outputMaxAttempts?: unknown;

  @defined('outputRetryBaseMs')
  @windowMax('outputRetryBaseMs')
  @IsInt(positiveMs('outputRetryBaseMs'))
  @Min(1, positiveMs('outputRetryBaseMs'))
  outputRetryBaseMs?: unknown;

  @defined('integrity')
  @IsIntegrityOptions()
  integrity?: unknown;
}
