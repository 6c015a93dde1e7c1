import type { CycliumClock } from '../primitives/clock.js';

/** What moving the clock does to a test app: its stored due times and its schedules. */
export interface ClockMoves {
  /** Time went from `from` to `to` (ms since the epoch, the clock's): `to - from` ms passed. */
  moved(from: number, to: number): Promise<void>;
}

/**
 * The clock of a test app (`createCycliumTestApp`): the system clock plus what `advance` added.
 * Moving it makes due, at once, what would have come due meanwhile: sleeps (`ep.sleep` reads this
 * clock), retry backoffs, delayed runs, wait deadlines (their stored due times come closer by the
 * same amount) and schedule buckets (each bucket passed is fired, as a timer would have). It never
 * goes back. The database's own clock is not moved: times the library compares there are moved
 * instead, so a `runAt` you pass is compared with real time (prefer `delayMs` in tests, or a
 * `runAt` you compute before advancing).
 */
export class TestClock implements CycliumClock {
  private offsetMs = 0;
  private moves: ClockMoves | undefined;

  now(): number {
    return Date.now() + this.offsetMs;
  }

  /** The clock's time as a Date. */
  date(): Date {
    return new Date(this.now());
  }

  /**
   * Moves the clock `ms` ahead and hands the app what fell due (not yet run: follow with
   * `runUntilIdle()`, or `waitFor` an episode).
   */
  async advance(ms: number): Promise<void> {
    if (!(Number.isSafeInteger(ms) && ms >= 0))
      throw new RangeError(`clock.advance(ms): ms must be a whole number >= 0 (got ${ms})`);
    const from = this.now();
    this.offsetMs += ms;
    await this.moves?.moved(from, from + ms);
  }

  /**
   * Connects the clock to the app it drives (createCycliumTestApp does).
   * @internal
   */
  drive(moves: ClockMoves): void {
    this.moves = moves;
  }
}
