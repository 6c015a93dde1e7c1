import { validateSync, type ValidationError } from 'class-validator';
import { CycliumConfigError } from './cyclium-config.error.js';
import type { CycliumOptions, ResolvedCycliumOptions } from './cyclium-options.interface.js';
import {
  CycliumOptionsSchema,
  RecoveryOptionsSchema,
  RetentionOptionsSchema,
} from './options.schema.js';
import { MIN_POSITION_FLUSH_MS, MIN_UNDISPATCHED_MAX_AGE_MS } from '../bus/position-flush.js';

export const DEFAULT_OPTIONS = {
  workClaims: false,
  workClaimsLeaseSeconds: 120,
  mode: 'full',
  bus: 'postgres',
  busPollIntervalMs: 10_000,
  busEchoIntervalMs: 10_000,
  busEchoTimeoutMs: 5_000,
  busRetentionMs: 3_600_000,
  busUndispatchedMaxAgeMs: 604_800_000,
  busPublishQueueMax: 10_000,
  busMaxPayloadBytes: 1_048_576,
  preparedStatements: true,
  jitterMs: 200,
  startedEvents: false,
  metrics: true,
  tracing: true,
  episodeShutdownMs: 5_000,
  recovery: {
    onBoot: true,
    settleMs: 120_000,
    staleAfterMs: 120_000,
    intervalMs: 60_000,
    notHostedGraceMs: 3_600_000,
  },
  triggerPollIntervalMs: 5_000,
  triggerPollIdleIntervalMs: 30_000,
  triggerRequestTtlMs: 3_600_000,
  checkoutTimeoutMs: 10_000,
  queryTimeoutMs: 30_000,
  startupWaitMs: 120_000,
  nodeBeatIntervalMs: 15_000,
  workflowEngine: true,
  deliveryTimeoutMs: 30_000,
  outputMaxAttempts: 8,
  outputRetryBaseMs: 5_000,
  retention: {
    archiveAfter: 604_800_000,
    deleteAfter: 604_800_000,
    batchSize: 1_000,
    intervalMs: 60_000,
  },
} as const;

function describe(value: unknown): string {
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'string') return JSON.stringify(withoutPassword(value));
  if (typeof value === 'object' && value !== null) return 'an object';
  return String(value);
}

/** A connection URL's password must not reach a boot log through a config error. */
function withoutPassword(value: string): string {
  return value.replace(/^(postgres(?:ql)?:\/\/[^:/@]*:)[^@]*@/i, '$1***@');
}

function problemsOf(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((error) => {
    const field = `${prefix}${error.property}`;
    if (!error.constraints) return problemsOf(error.children ?? [], `${field}.`);
    if (error.constraints['whitelistValidation']) return [`${field} is not a CycliumModule option`];
    return Object.values(error.constraints)
      .slice(0, 1)
      .map((message) => `${message} (got ${describe(error.value)})`);
  });
}

/** An empty slug or env means "unset", exactly like leaving it out. */
const blankToNull = (value: string | null | undefined): string | null => (value ? value : null);

/**
 * Validates what the host passed and fills in every default. Throws CycliumConfigError, which
 * names each bad field and what it accepts, so a typo fails boot instead of running misconfigured.
 */
export function resolveCycliumOptions(raw: CycliumOptions | undefined): ResolvedCycliumOptions {
  const input: CycliumOptions = raw ?? {};
  if (typeof input !== 'object' || Array.isArray(input)) {
    throw new CycliumConfigError([`options must be an object (got ${describe(input)})`]);
  }
  const schema = Object.assign(new CycliumOptionsSchema(), input);
  const recoveryInput = input.recovery;
  if (recoveryInput !== undefined && typeof recoveryInput === 'object' && recoveryInput !== null) {
    schema.recovery = Object.assign(new RecoveryOptionsSchema(), recoveryInput);
  }
  const retentionInput = input.retention;
  if (typeof retentionInput === 'object' && retentionInput !== null) {
    schema.retention = Object.assign(new RetentionOptionsSchema(), retentionInput);
  }
  const problems = problemsOf(
    validateSync(schema, { whitelist: true, forbidNonWhitelisted: true }),
  );
  if (problems.length > 0) throw new CycliumConfigError(problems);
  checkUndispatchedWindow(input);
  const retention = resolveRetention(input);

  const env = blankToNull(input.env);
  const recovery = { ...DEFAULT_OPTIONS.recovery, ...input.recovery };
  return {
    nodeIdentity: input.nodeIdentity ?? null,
    workClaims: input.workClaims ?? DEFAULT_OPTIONS.workClaims,
    workClaimsLeaseSeconds: input.workClaimsLeaseSeconds ?? DEFAULT_OPTIONS.workClaimsLeaseSeconds,
    mode: input.mode ?? DEFAULT_OPTIONS.mode,
    stackSlug: blankToNull(input.stackSlug),
    env,
    bus: input.bus ?? DEFAULT_OPTIONS.bus,
    busPollIntervalMs: input.busPollIntervalMs ?? DEFAULT_OPTIONS.busPollIntervalMs,
    busEchoIntervalMs: input.busEchoIntervalMs ?? DEFAULT_OPTIONS.busEchoIntervalMs,
    busEchoTimeoutMs: input.busEchoTimeoutMs ?? DEFAULT_OPTIONS.busEchoTimeoutMs,
    busRetentionMs: input.busRetentionMs ?? DEFAULT_OPTIONS.busRetentionMs,
    busUndispatchedMaxAgeMs:
      input.busUndispatchedMaxAgeMs ?? DEFAULT_OPTIONS.busUndispatchedMaxAgeMs,
    busPublishQueueMax: input.busPublishQueueMax ?? DEFAULT_OPTIONS.busPublishQueueMax,
    busMaxPayloadBytes: input.busMaxPayloadBytes ?? DEFAULT_OPTIONS.busMaxPayloadBytes,
    listenUrl: input.listenUrl ?? null,
    preparedStatements: input.preparedStatements ?? DEFAULT_OPTIONS.preparedStatements,
    jitterMs: input.jitterMs ?? DEFAULT_OPTIONS.jitterMs,
    startedEvents: input.startedEvents ?? DEFAULT_OPTIONS.startedEvents,
    metrics: input.metrics ?? DEFAULT_OPTIONS.metrics,
    tracing: input.tracing ?? DEFAULT_OPTIONS.tracing,
    episodeShutdownMs: input.episodeShutdownMs ?? DEFAULT_OPTIONS.episodeShutdownMs,
    recovery: {
      ...recovery,
      intervalMs: recovery.intervalMs ?? null,
      notHostedGraceMs:
        input.recovery?.notHostedGraceMs === undefined
          ? DEFAULT_OPTIONS.recovery.notHostedGraceMs
          : input.recovery.notHostedGraceMs,
    },
    triggerPollIntervalMs: input.triggerPollIntervalMs ?? DEFAULT_OPTIONS.triggerPollIntervalMs,
    triggerPollIdleIntervalMs: resolveIdlePoll(input),
    triggerPollSourceStack: blankToNull(input.triggerPollSourceStack),
    // The poller feeds its own env unless told otherwise; an explicit null targets the default env.
    triggerPollSourceEnv:
      input.triggerPollSourceEnv === undefined ? env : blankToNull(input.triggerPollSourceEnv),
    triggerRequestTtlMs: input.triggerRequestTtlMs ?? DEFAULT_OPTIONS.triggerRequestTtlMs,
    retention,
    dataSource: input.dataSource,
    checkoutTimeoutMs: input.checkoutTimeoutMs ?? DEFAULT_OPTIONS.checkoutTimeoutMs,
    queryTimeoutMs: input.queryTimeoutMs ?? DEFAULT_OPTIONS.queryTimeoutMs,
    startupWaitMs: input.startupWaitMs ?? DEFAULT_OPTIONS.startupWaitMs,
    nodeBeatIntervalMs: input.nodeBeatIntervalMs ?? DEFAULT_OPTIONS.nodeBeatIntervalMs,
    workflowEngine: input.workflowEngine ?? DEFAULT_OPTIONS.workflowEngine,
    deliveryTimeoutMs: input.deliveryTimeoutMs ?? DEFAULT_OPTIONS.deliveryTimeoutMs,
    outputMaxAttempts: input.outputMaxAttempts ?? DEFAULT_OPTIONS.outputMaxAttempts,
    outputRetryBaseMs: input.outputRetryBaseMs ?? DEFAULT_OPTIONS.outputRetryBaseMs,
    integrity: input.integrity
      ? { keyId: input.integrity.keyId, keys: { ...input.integrity.keys } }
      : null,
  };
}

/**
 * With the durable bus, retention counts an event as undispatched once a position of its type has
 * not passed it for `busUndispatchedMaxAgeMs`; positions are stored at most once a second, so a
 * window must hold a few of those writes (see positionFlushMs), or events whose dispatch is only
 * waiting to be stored are deleted and warned about.
 */
function checkUndispatchedWindow(input: CycliumOptions): void {
  const window = input.busUndispatchedMaxAgeMs;
  const durable = (input.bus ?? DEFAULT_OPTIONS.bus) === 'postgres';
  if (!durable || window === undefined || window >= MIN_UNDISPATCHED_MAX_AGE_MS) return;
  throw new CycliumConfigError([
    `busUndispatchedMaxAgeMs must be at least ${MIN_UNDISPATCHED_MAX_AGE_MS} with bus ` +
      `'postgres': dispatch ` +
      `positions are stored at most every ${MIN_POSITION_FLUSH_MS} ms, and the window must hold ` +
      `four such writes (got ${window})`,
  ]);
}

/**
 * How long an idle poller may skip its ticks. Only a durable bus carries other nodes' wake-ups,
 * so with any other the poll keeps its interval, as it does with `integrity` (the wake-ups the
 * database writes for signals, events and children are unsigned, and ignored); a host that chose
 * the interval and not this keeps its interval too (what it tuned stays what it gets).
 */
function resolveIdlePoll(input: CycliumOptions): number {
  const interval = input.triggerPollIntervalMs ?? DEFAULT_OPTIONS.triggerPollIntervalMs;
  const given = input.triggerPollIdleIntervalMs;
  if (given !== undefined && given < interval)
    throw new CycliumConfigError([
      `triggerPollIdleIntervalMs must be at least triggerPollIntervalMs (${interval} here): ` +
        `an idle poll comes no more often than a busy one (got ${given})`,
    ]);
  if ((input.bus ?? DEFAULT_OPTIONS.bus) !== 'postgres' || input.integrity) return interval;
  if (given !== undefined) return given;
  return input.triggerPollIntervalMs === undefined
    ? Math.max(interval, DEFAULT_OPTIONS.triggerPollIdleIntervalMs)
    : interval;
}

/**
 * Retention with its defaults. A dedupe key stays a duplicate until its episode is archived, so
 * `archiveAfter` must cover the longest time the same trigger can arrive again: an event the bus
 * replays (up to `busUndispatchedMaxAgeMs`) or a trigger request still pending
 * (`triggerRequestTtlMs`). Left out, it grows to cover them; set shorter, boot fails naming it.
 */
function resolveRetention(input: CycliumOptions): ResolvedCycliumOptions['retention'] {
  if (input.retention === false) return null;
  const given = input.retention ?? {};
  const replayWindow = Math.max(
    input.busUndispatchedMaxAgeMs ?? DEFAULT_OPTIONS.busUndispatchedMaxAgeMs,
    input.triggerRequestTtlMs ?? DEFAULT_OPTIONS.triggerRequestTtlMs,
  );
  if (given.archiveAfter !== undefined && given.archiveAfter < replayWindow) {
    throw new CycliumConfigError([
      `retention.archiveAfter must be at least busUndispatchedMaxAgeMs and triggerRequestTtlMs ` +
        `(${replayWindow} here): ` +
        `an event replayed, or a request taken, after its episode was archived would run again ` +
        `(got ${given.archiveAfter})`,
    ]);
  }
  const defaults = DEFAULT_OPTIONS.retention;
  return {
    archiveAfter: given.archiveAfter ?? Math.max(defaults.archiveAfter, replayWindow),
    deleteAfter: given.deleteAfter === undefined ? defaults.deleteAfter : given.deleteAfter,
    batchSize: given.batchSize ?? defaults.batchSize,
    intervalMs: given.intervalMs ?? defaults.intervalMs,
  };
}
