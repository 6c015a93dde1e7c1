import { validateCronExpression } from 'cron';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import type { ActorOptions } from './actor.decorator.js';
import type { ExpectationOptions } from './expectation.decorator.js';
import { retryPolicyProblem } from '../episodes/retry-policy.js';
import { flowProblem } from '../episodes/flow-limits.js';
import { versionProblem } from '../versions/expectation-version.js';
import { parseInterval } from './interval.js';
import { MAX_TIMER_MS, MAX_WINDOW_MS } from '../primitives/time-limits.js';
import type { RegisteredActor, RegisteredExpectation } from './registered-actor.js';

const OVERFLOWS = ['queue', 'drop', 'shed_oldest'];

/** `@Actor` options with their defaults, or ActorDefinitionError naming the class and the field. */
export function validateActor(
  className: string,
  options: ActorOptions | undefined,
): RegisteredActor {
  const fail = (message: string): never => {
    throw new ActorDefinitionError(`@Actor on ${className}: ${message}`);
  };
  if (!options || typeof options.id !== 'string' || options.id.trim() === '')
    fail('id must be a non-empty string');
  const actorOptions = options as ActorOptions;
  const max = actorOptions.maxConcurrentEpisodes ?? 3;
  if (!Number.isInteger(max) || max < 1)
    fail(`maxConcurrentEpisodes must be a whole number >= 1 (got ${max})`);
  const overflow = actorOptions.overflow ?? 'queue';
  if (!OVERFLOWS.includes(overflow))
    fail(`overflow must be one of: ${OVERFLOWS.join(', ')} (got ${String(overflow)})`);
  const maxQueued = actorOptions.maxQueued ?? max;
  if (!Number.isInteger(maxQueued) || maxQueued < 1)
    fail(`maxQueued must be a whole number >= 1 (got ${maxQueued})`);
  if (actorOptions.stacks !== undefined && !Array.isArray(actorOptions.stacks))
    fail('stacks must be an array of stack slugs');
  return {
    id: actorOptions.id,
    className,
    options: {
      id: actorOptions.id,
      maxConcurrentEpisodes: max,
      overflow,
      maxQueued,
      stacks: actorOptions.stacks,
    },
    expectations: new Map(),
  };
}

/**
 * `@Expectation` options, with the trigger parsed, or ActorDefinitionError naming the method:
 * anything that could only fail later (a bad cron, an interval nobody can parse) fails boot.
 */
export function validateExpectation(
  actorId: string,
  className: string,
  methodName: string,
  options: ExpectationOptions,
): RegisteredExpectation {
  const fail = (message: string): never => {
    throw new ActorDefinitionError(`@Expectation on ${className}.${methodName}: ${message}`);
  };
  const id = options.id ?? methodName;
  const trigger = options.trigger;
  if (trigger && typeof trigger === 'object') {
    // The types rule this out; plain JavaScript (or a cast) could still mix kinds, and one would be
    // silently dropped.
    const kinds = ['event', 'every', 'cron'].filter((k) => k in trigger);
    const unknown = Object.keys(trigger).filter(
      (k) => !['event', 'every', 'cron', 'filter', 'catchUp'].includes(k),
    );
    if (
      kinds.length !== 1 ||
      unknown.length > 0 ||
      ('filter' in trigger && !('event' in trigger)) ||
      ('catchUp' in trigger && 'event' in trigger)
    ) {
      fail(
        `trigger must be exactly one of { event, filter? }, { every, catchUp? } or { cron, ` +
          `catchUp? } (got ${JSON.stringify(trigger)})`,
      );
    }
    const catchUp = (trigger as { catchUp?: unknown }).catchUp;
    if (catchUp !== undefined && !['none', 'last', 'all'].includes(catchUp as string))
      fail(`catchUp must be 'none', 'last' or 'all' (got ${JSON.stringify(catchUp)})`);
  }
  let intervalMs: number | null = null;
  if (trigger === 'manual' || trigger === 'workflow') {
    // nothing to parse
  } else if (trigger && typeof trigger === 'object' && trigger.every !== undefined) {
    intervalMs = parseInterval(trigger.every);
    if (intervalMs === null)
      fail(
        `cannot parse interval ${JSON.stringify(trigger.every)} (use '30s', '5m', '1h', '1d' or ` +
          `milliseconds)`,
      );
    const every = JSON.stringify(trigger.every);
    if ((intervalMs ?? 0) > MAX_WINDOW_MS)
      fail(`every must be at most ${MAX_WINDOW_MS} ms (got ${every})`);
  } else if (trigger && typeof trigger === 'object' && trigger.cron !== undefined) {
    const { valid, error } = validateCronExpression(trigger.cron);
    if (!valid)
      fail(`cannot parse cron ${JSON.stringify(trigger.cron)}: ${error?.message ?? 'invalid'}`);
  } else if (!(trigger && typeof trigger === 'object' && typeof trigger.event === 'string')) {
    fail(
      `trigger must be { event }, { every }, { cron }, 'manual' or 'workflow' (got ` +
        `${JSON.stringify(trigger)})`,
    );
  }
  // A debounce or cooldown runs out on a timer here; a delay is a due time in SQL.
  const limits = {
    debounceMs: MAX_TIMER_MS,
    cooldownMs: MAX_TIMER_MS,
    delayMs: MAX_WINDOW_MS,
  } as const;
  for (const [field, max] of Object.entries(limits) as Array<[keyof typeof limits, number]>) {
    const value = options[field];
    if (value === undefined) continue;
    if (!(Number.isInteger(value) && value >= 0))
      fail(`${field} must be a whole number of milliseconds >= 0`);
    if (value > max) fail(`${field} must be at most ${max} ms (got ${value})`);
  }
  if (
    options.maxAttempts !== undefined &&
    !(Number.isInteger(options.maxAttempts) && options.maxAttempts >= 1)
  ) {
    fail('maxAttempts must be a whole number >= 1');
  }
  if (
    options.recoveryPolicy !== undefined &&
    !['restart', 'fail'].includes(options.recoveryPolicy)
  ) {
    fail(`recoveryPolicy must be 'restart' or 'fail'`);
  }
  const retryProblem = options.retry === undefined ? null : retryPolicyProblem(options.retry);
  if (retryProblem) fail(retryProblem);
  if (options.retryable !== undefined && typeof options.retryable !== 'function')
    fail('retryable must be a function (error) => boolean');
  const flow = flowProblem(options);
  if (flow) fail(flow);
  const version = versionProblem(options);
  if (version) fail(version);
  return {
    id,
    actorId,
    className,
    methodName,
    options,
    intervalMs,
    handler: async () => undefined,
  };
}
