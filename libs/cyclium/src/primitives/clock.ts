/**
 * The wall clock the library reads in JavaScript (a sleep's wake-up time, schedules): the system's
 * in production. Only the testing kit provides another (`@cyclium/nestjs/testing`'s TestClock, by
 * overriding CYCLIUM_CLOCK); no option reaches it.
 */
export interface CycliumClock {
  /** Milliseconds since the epoch, as Date.now(). */
  now(): number;
}

export const SYSTEM_CLOCK: CycliumClock = { now: () => Date.now() };
