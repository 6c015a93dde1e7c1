import { describe, expect, it } from '@jest/globals';
import { PollQuiet } from './poll-quiet.js';

describe('PollQuiet', () => {
  it('lets ticks pass after an idle poll until the idle interval or the next due time', () => {
    const quiet = new PollQuiet(30_000, 5_000);
    expect(quiet.ticks(0)).toBe(true);
    quiet.polled(1_000, false, null);
    expect(quiet.ticks(30_999)).toBe(false);
    expect(quiet.ticks(31_000)).toBe(true);
    quiet.polled(1_000, false, 7_000);
    expect(quiet.ticks(7_999)).toBe(false);
    expect(quiet.ticks(8_000)).toBe(true);
    expect(quiet.horizonMs).toBe(30_000);
  });

  it('polls at every tick after a busy poll or a failed one', () => {
    const quiet = new PollQuiet(30_000, 5_000);
    quiet.polled(0, true, null);
    expect(quiet.ticks(1)).toBe(true);
    quiet.polled(0, false, null);
    quiet.reset();
    expect(quiet.ticks(1)).toBe(true);
  });

  it('moves the next poll earlier for a request written here, never later', () => {
    const quiet = new PollQuiet(30_000, 5_000);
    quiet.polled(0, false, null);
    quiet.dueIn(2_000, 1_000);
    expect(quiet.ticks(2_999)).toBe(false);
    expect(quiet.ticks(3_000)).toBe(true);
    quiet.dueIn(60_000, 1_000);
    expect(quiet.ticks(3_000)).toBe(true);
  });

  it('keeps a write noted until a poll sent an interval after the note has read it', () => {
    const quiet = new PollQuiet(30_000, 5_000);
    quiet.polled(0, false, null);
    // Noted before its transaction commits: a poll sent at once may not see the row.
    quiet.dueIn(0, 1_000);
    quiet.polled(1_001, false, null);
    expect(quiet.ticks(6_000)).toBe(true);
    // One sent an interval after the note saw it: what it read decides.
    quiet.polled(6_000, false, null);
    expect(quiet.ticks(11_000)).toBe(false);
    expect(quiet.ticks(36_000)).toBe(true);
  });

  it('never idles when the idle interval is no longer than the tick', () => {
    const quiet = new PollQuiet(5_000, 5_000);
    quiet.polled(0, false, null);
    expect(quiet.ticks(1)).toBe(true);
    expect(quiet.horizonMs).toBe(0);
  });
});
