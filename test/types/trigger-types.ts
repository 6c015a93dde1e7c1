/**
 * Compile-time checks, run by `tsc -p test/tsconfig.test.json` in `npm test`: each
 * `@ts-expect-error` fails the build if the line below it ever compiles.
 */
import type { ExpectationOptions, WorkflowOptions } from '@cyclium/nestjs';

export const valid: ExpectationOptions[] = [
  { trigger: { event: 'resource.updated', filter: { kind: { in: ['db', 'cache'] } } } },
  { trigger: { every: '5m' } },
  { trigger: { cron: '0 * * * *' } },
  { trigger: { every: '5m', catchUp: 'all' } },
  { trigger: { cron: '0 * * * *', catchUp: 'last' } },
  { trigger: 'manual', delayMs: 60_000 },
  { trigger: 'manual' },
  { trigger: 'workflow' },
];

export const mixed: ExpectationOptions[] = [
  // @ts-expect-error an event trigger cannot also be a cron trigger
  { trigger: { event: 'e', cron: '* * * * *' } },
  // @ts-expect-error nor an interval
  { trigger: { event: 'e', every: '1m' } },
  // @ts-expect-error an interval with a cron
  { trigger: { every: '1m', cron: '* * * * *' } },
  // @ts-expect-error a filter belongs to an event trigger only
  { trigger: { every: '1m', filter: { kind: 'db' } } },
  // @ts-expect-error not a trigger at all
  { trigger: 'sometimes' },
  // @ts-expect-error an event trigger has no buckets to catch up on
  { trigger: { event: 'e', catchUp: 'all' } },
  // @ts-expect-error catch-up is none, last or all
  { trigger: { every: '1m', catchUp: 'some' } },
];

export const workflows: WorkflowOptions[] = [
  { id: 'ok', trigger: { event: 'e', filter: { a: 1 } } },
  // @ts-expect-error workflows start on events or by hand, not on timers
  { id: 'timed', trigger: { event: 'e', cron: '* * * * *' } },
];
