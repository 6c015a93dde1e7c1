import type { SchedulerRegistry } from '@nestjs/schedule';
import { CronJob } from 'cron';
import { bucketStart } from '../actors/interval.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { MAX_TIMER_MS } from '../primitives/time-limits.js';

/** What a timer calls at each tick, with the bucket every node computes alike. */
export type FireSchedule = (expectation: RegisteredExpectation, bucket: Date) => void;

/**
 * The wall-clock triggers of one node: `every` timers aligned to buckets and cron jobs, registered
 * in the app's SchedulerRegistry. Ticks after `stop` fire nothing.
 */
export class TimerTriggers {
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly cronJobs: Array<{ name: string; job: CronJob }> = [];
  private on = true;

  constructor(private readonly fire: FireSchedule) {}

  /**
   * Fires at the start of each wall-clock bucket, so every node computes the same bucket and key. A
   * bucket further off than a timer can wait (an `every` over 24.8 days) is waited for in steps.
   */
  every(expectation: RegisteredExpectation, intervalMs: number): void {
    const now = Date.now();
    const next = bucketStart(now, intervalMs) + intervalMs;
    const timer = setTimeout(
      () => {
        this.timers.delete(timer);
        if (!this.on) return;
        this.every(expectation, intervalMs);
        if (Date.now() >= next) this.fire(expectation, new Date(next));
      },
      Math.min(next - now, MAX_TIMER_MS),
    );
    timer.unref();
    this.timers.add(timer);
  }

  cron(
    name: string,
    expectation: RegisteredExpectation,
    cronTime: string,
    registry: SchedulerRegistry | undefined,
  ): void {
    const job = CronJob.from({
      cronTime,
      timeZone: 'UTC',
      start: true,
      // The tick to the minute: nodes whose timers fire a few ms apart agree on the bucket.
      onTick: () => this.fire(expectation, new Date(bucketStart(Date.now(), 60_000))),
    });
    registry?.addCronJob(name, job);
    this.cronJobs.push({ name, job });
  }

  async stop(registry: SchedulerRegistry | undefined): Promise<void> {
    this.on = false;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const { name, job } of this.cronJobs.splice(0)) {
      await job.stop();
      if (registry?.doesExist('cron', name)) registry.deleteCronJob(name);
    }
  }
}
