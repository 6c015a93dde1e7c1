import type { Logger } from '@nestjs/common';
import type { CatchUp } from '../actors/expectation.decorator.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { lastScheduledBucket } from '../episodes/schedule-history.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { missedBuckets, type Schedule } from './schedule-buckets.js';

/** Fires one bucket's trigger; resolves false once this node has stopped. */
export type FireBucket = (expectation: RegisteredExpectation, bucket: Date) => Promise<boolean>;

/**
 * At boot, the buckets of a schedule that fell while no node ran it (the episodes say which ran
 * last), fired as `catchUp` declares, oldest first. Every node that boots does the same and the
 * buckets' dedupe keys let one episode through per bucket, so a rolling deploy (peers kept firing)
 * finds nothing to do and a whole-cluster stop is made up for once. A schedule with no episode
 * left (never run, or all deleted by retention) has nothing to catch up on.
 */
export async function catchUpSchedule(
  sql: SqlExecutor,
  env: string | null,
  logger: Logger,
  expectation: RegisteredExpectation,
  schedule: Schedule,
  catchUp: CatchUp,
  fire: FireBucket,
): Promise<number> {
  if (catchUp === 'none') return 0;
  const last = await lastScheduledBucket(sql, expectation.actorId, expectation.id, env);
  if (!last) return 0;
  const { buckets, missed, skipped } = missedBuckets(schedule, catchUp, last, Date.now());
  const what = `${expectation.actorId}.${expectation.id}`;
  if (buckets.length === 0) return 0;
  const first = (buckets[0] as Date).toISOString();
  const running =
    catchUp === 'last'
      ? `running the latest, ${first}`
      : `running ${buckets.length === 1 ? first : `each, ${first} to ${(buckets.at(-1) as Date).toISOString()}`}`;
  logger.log(`catch-up of ${what}: ${missed} bucket(s) fell since ${last.toISOString()} while no node ran it; ${running}`);
  if (skipped > 0) logger.warn(`catch-up of ${what}: the ${skipped} oldest bucket(s) skipped, past the ${buckets.length} latest`);
  let fired = 0;
  for (const bucket of buckets) {
    if (!(await fire(expectation, bucket))) break;
    fired++;
  }
  return fired;
}
