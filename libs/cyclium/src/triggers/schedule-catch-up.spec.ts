import { afterEach, describe, expect, it, jest } from '@jest/globals';
import type { Logger } from '@nestjs/common';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { catchUpSchedule, type CatchUpScope } from './schedule-catch-up.js';

const NOW = Date.parse('2026-12-04T12:00:30.000Z');
const READ_AT = new Date(NOW - 500);
const expectation = { actorId: 'a', id: 'e' } as RegisteredExpectation;
const logger = { log: () => undefined, warn: () => undefined } as unknown as Logger;

/**
 * A catch-up whose episodes say `last` ran last, read at READ_AT; what it fired, with each bound.
 */
async function catchUp(last: string, retention: CatchUpScope['retention']) {
  const sql = {
    query: async () => ({ rows: [{ last, read_at: READ_AT }] }),
  } as unknown as SqlExecutor;
  const fired: Array<[string, string | undefined]> = [];
  const fire = async (_: RegisteredExpectation, bucket: Date, insertBefore?: Date) => {
    fired.push([bucket.toISOString(), insertBefore?.toISOString()]);
    return true;
  };
  await catchUpSchedule(
    { sql, env: null, logger, retention },
    expectation,
    { intervalMs: 10_000 },
    'all',
    fire,
  );
  return fired;
}

describe('catchUpSchedule', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it(
    'bounds each insert by the read plus archiveAfter; reaches back at most archiveAfter + ' +
      'deleteAfter',
    async () => {
      jest.spyOn(Date, 'now').mockReturnValue(NOW);
      const bound = new Date(READ_AT.getTime() + 15_000).toISOString();
      // Buckets of 10 s since 11:59:00: the read at 12:00:29.5 less 25 s (15 s + 10 s) reaches back
      // to 12:00:04.5.
      expect(
        await catchUp('2026-12-04T11:59:00.000Z', { archiveAfter: 15_000, deleteAfter: 10_000 }),
      ).toEqual([
        ['2026-12-04T12:00:10.000Z', bound],
        ['2026-12-04T12:00:20.000Z', bound],
        ['2026-12-04T12:00:30.000Z', bound],
      ]);
      // Archived rows never deleted: every bucket since the last, each bounded all the same.
      const kept = await catchUp('2026-12-04T11:59:40.000Z', {
        archiveAfter: 15_000,
        deleteAfter: null,
      });
      const times = ['11:59:50', '12:00:00', '12:00:10', '12:00:20', '12:00:30'];
      expect(kept.map(([bucket]) => bucket)).toEqual(times.map((t) => `2026-12-04T${t}.000Z`));
      expect(kept.every(([, insertBefore]) => insertBefore === bound)).toBe(true);
      // No retention: no episode is ever archived, so no bound is needed.
      expect(await catchUp('2026-12-04T12:00:10.000Z', null)).toEqual([
        ['2026-12-04T12:00:20.000Z', undefined],
        ['2026-12-04T12:00:30.000Z', undefined],
      ]);
    },
  );
});
