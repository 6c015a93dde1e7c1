import { describe, expect, it } from '@jest/globals';
import { MAX_CATCH_UP, missedBuckets } from './schedule-buckets.js';

const at = (iso: string) => new Date(iso);
const iso = (dates: Date[]) => dates.map((d) => d.toISOString());

describe('missedBuckets', () => {
  const last = at('2026-12-03T10:00:00.000Z');
  const now = at('2026-12-03T10:03:20.000Z').getTime();

  it(
    'lists the interval buckets after the last one up to the one under way, as catchUp picks ' +
      'them',
    () => {
      const every = { intervalMs: 60_000 };
      expect(iso(missedBuckets(every, 'all', last, now).buckets)).toEqual([
        '2026-12-03T10:01:00.000Z',
        '2026-12-03T10:02:00.000Z',
        '2026-12-03T10:03:00.000Z',
      ]);
      expect(iso(missedBuckets(every, 'last', last, now).buckets)).toEqual([
        '2026-12-03T10:03:00.000Z',
      ]);
      expect(missedBuckets(every, 'none', last, now).buckets).toEqual([]);
      expect(missedBuckets(every, 'all', at('2026-12-03T10:03:00.000Z'), now).buckets).toEqual([]);
    },
  );

  it('lists cron ticks to the minute, in UTC', () => {
    expect(iso(missedBuckets({ cron: '*/2 * * * *' }, 'all', last, now).buckets)).toEqual([
      '2026-12-03T10:02:00.000Z',
    ]);
    expect(
      iso(missedBuckets({ cron: '0 * * * *' }, 'all', at('2026-12-03T07:00:00.000Z'), now).buckets),
    ).toEqual(['2026-12-03T08:00:00.000Z', '2026-12-03T09:00:00.000Z', '2026-12-03T10:00:00.000Z']);
  });

  it(`runs at most the latest ${MAX_CATCH_UP} and counts the rest skipped`, () => {
    const { buckets, skipped } = missedBuckets(
      { intervalMs: 1_000 },
      'all',
      last,
      last.getTime() + (MAX_CATCH_UP + 5) * 1_000,
    );
    expect(buckets).toHaveLength(MAX_CATCH_UP);
    expect(skipped).toBe(5);
    expect(missedBuckets({ intervalMs: 1_000 }, 'last', last, last.getTime() + 10_500).missed).toBe(
      10,
    );
    expect(buckets.at(-1)?.getTime()).toBe(last.getTime() + (MAX_CATCH_UP + 5) * 1_000);
  });
});
