import type { Logger } from '@nestjs/common';
import type { CatchUp } from '../actors/expectation.decorator.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { scheduleHistory } from '../episodes/schedule-history.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { missedBuckets, type Schedule } from './schedule-buckets.js';

/**
 * Fires one bucket's trigger, its episode inserted only before `insertBefore` by the database clock
 * when given; resolves false once this node has stopped.
 */
export type FireBucket = (
  expectation: RegisteredExpectation,
  bucket: Date,
  insertBefore?: Date,
) => Promise<boolean>;

/**
 * Where a catch-up reads and logs, and the retention windows it keeps within (null: retention is
 * off).
 */
export interface CatchUpScope {
  sql: SqlExecutor;
  env: string | null;
  logger: Logger;
  retention: { archiveAfter: number; deleteAfter: number | null } | null;
}

/**
 * At boot, the buckets of a schedule that fell while no node ran it (the episodes say which ran
 * last), fired as `catchUp` declares, oldest first. Every node that boots does the same and the
 * buckets' dedupe keys let one episode through per bucket, so a rolling deploy (peers kept firing)
 * finds nothing to do and a whole-cluster stop is made up for once. A schedule with no episode
 * left (never run, or all deleted by retention) has nothing to catch up on.
 *
 * A key lets one episode through only until that episode is archived, so two bounds keep each
 * bucket to one episode. No bucket after the last one read had an episode when it was read (none
 * that retention had not deleted), so one started since ends, and is archived, after the read:
 * every insert of the catch-up is bounded by the read's time plus `archiveAfter`, for a catch-up
 * that is slow to get there (an outage, a stalled process). And a bucket older than `archiveAfter`
 * plus `deleteAfter` may have had an episode that retention deleted since, while an older bucket's
 * episode (still running, or ended later) stayed the last one read: the catch-up never reaches
 * back that far.
 */
export async function catchUpSchedule(
  scope: CatchUpScope,
  expectation: RegisteredExpectation,
  schedule: Schedule,
  catchUp: CatchUp,
  fire: FireBucket,
): Promise<number> {
  if (catchUp === 'none') return 0;
  const { sql, env, logger, retention } = scope;
  const { lastBucket, readAt } = await scheduleHistory(
    sql,
    expectation.actorId,
    expectation.id,
    env,
  );
  if (!lastBucket) return 0;
  const what = `${expectation.actorId}.${expectation.id}`;
  const deleteAfter = retention?.deleteAfter ?? null;
  const horizon =
    retention && deleteAfter !== null
      ? readAt.getTime() - retention.archiveAfter - deleteAfter
      : null;
  const from = horizon !== null && horizon > lastBucket.getTime() ? new Date(horizon) : lastBucket;
  if (from !== lastBucket) {
    logger.warn(
      `catch-up of ${what}: the buckets from ${lastBucket.toISOString()} to ` +
        `${from.toISOString()} are not run: past ` +
        `retention.archiveAfter + deleteAfter, retention may have deleted an episode that ran ` +
        `for one of them`,
    );
  }
  const { buckets, missed, skipped } = missedBuckets(schedule, catchUp, from, Date.now());
  if (buckets.length === 0) return 0;
  const first = (buckets[0] as Date).toISOString();
  const running =
    catchUp === 'last'
      ? `running the latest, ${first}`
      : `running ${
          buckets.length === 1
            ? first
            : `each, ${first} to ` + `${(buckets.at(-1) as Date).toISOString()}`
        }`;
  const since = from.toISOString();
  logger.log(
    `catch-up of ${what}: ${missed} bucket(s) fell since ${since} while no node ran it; ${running}`,
  );
  if (skipped > 0)
    logger.warn(
      `catch-up of ${what}: the ${skipped} oldest bucket(s) skipped, past the ${buckets.length} ` +
        `latest`,
    );
  const insertBefore = retention ? new Date(readAt.getTime() + retention.archiveAfter) : undefined;
  let fired = 0;
  for (const bucket of buckets) {
    if (!(await fire(expectation, bucket, insertBefore))) break;
    fired++;
  }
  return fired;
}
