import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { BusRetention } from './bus-retention.js';
import type { EventLog, PruneBatch, PruneKey, PruneWindows } from './event-log.js';
import type { SqlExecutor } from '../sql/sql-executor.js';

/** A log whose every batch is full and expired: a pass only ends by its time budget. */
function endlessLog(afters: string[], young: () => boolean) {
  let next = 0;
  const prune = async (
    _sql: SqlExecutor,
    _windows: PruneWindows,
    limit: number,
    after?: PruneKey,
  ) => {
    const from = after?.id ?? '0';
    afters.push(from);
    next = Math.max(next, Number(from)) + limit;
    const last = { txId: '7', id: String(next) };
    return {
      held: true,
      deleted: limit,
      undispatched: 0,
      examined: limit,
      last,
      young: young(),
    } satisfies PruneBatch;
  };
  return { prune } as unknown as EventLog;
}

describe('BusRetention', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it(
    'goes on from where a pass ran out of time, and starts over once a pass reached young ' +
      'rows',
    async () => {
      let now = 0;
      jest.spyOn(performance, 'now').mockImplementation(() => (now += 1_000));
      const afters: string[] = [];
      let young = false;
      const retention = new BusRetention(
        {} as SqlExecutor,
        endlessLog(afters, () => young),
        3_600_000,
        604_800_000,
      );

      expect(await retention.pruneNow()).toBeGreaterThan(0);
      const first = [...afters];
      expect(first[0]).toBe('0');
      expect(first.length).toBeGreaterThan(1);

      afters.length = 0;
      young = true;
      await retention.pruneNow();
      // The second pass picked up past the last id the first one examined, and stopped at young
      // rows.
      expect(afters).toEqual([String(Number(first.at(-1)) + 1_000)]);

      afters.length = 0;
      await retention.pruneNow();
      expect(afters).toEqual(['0']);
    },
  );
});
