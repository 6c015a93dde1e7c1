import { CronTime } from 'cron';
import { bucketStart } from '../actors/interval.js';
import type { CatchUp } from '../actors/expectation.decorator.js';

/**
 * The most buckets one catch-up runs: past it, the latest ones run and the rest are reported
 * skipped.
 */
export const MAX_CATCH_UP = 1_000;

/**
 * How a schedule's buckets fall: every `intervalMs` from the epoch, or at a cron expression's ticks
 * (UTC, to the minute).
 */
export type Schedule = { intervalMs: number } | { cron: string };

/**
 * The buckets of `schedule` after `last` and up to `now` (the bucket under way included: its tick
 * may have fallen while no node ran), as `catchUp` picks them: none, the latest, or every one (the
 * latest MAX_CATCH_UP). `missed` counts them all; `skipped`, the ones left out by the cap.
 */
export function missedBuckets(
  schedule: Schedule,
  catchUp: CatchUp,
  last: Date,
  now: number,
): { buckets: Date[]; missed: number; skipped: number } {
  if (catchUp === 'none') return { buckets: [], missed: 0, skipped: 0 };
  const all: Date[] = [];
  let skipped = 0;
  const keep = (bucket: Date) => {
    all.push(bucket);
    if (all.length > MAX_CATCH_UP) {
      all.shift();
      skipped++;
    }
  };
  if ('intervalMs' in schedule) {
    for (
      let at = bucketStart(last.getTime(), schedule.intervalMs) + schedule.intervalMs;
      at <= now;
      at += schedule.intervalMs
    )
      keep(new Date(at));
  } else {
    const time = new CronTime(schedule.cron, 'UTC');
    for (
      let at = time.getNextDateFrom(last, 'UTC').toJSDate();
      at.getTime() <= now;
      at = time.getNextDateFrom(at, 'UTC').toJSDate()
    ) {
      // A tick's bucket is its minute, as the live timer computes it.
      const bucket = new Date(bucketStart(at.getTime(), 60_000));
      if (bucket.getTime() > last.getTime()) keep(bucket);
    }
  }
  const missed = all.length + skipped;
  if (catchUp === 'last') return { buckets: all.slice(-1), missed, skipped: 0 };
  return { buckets: all, missed, skipped };
}
