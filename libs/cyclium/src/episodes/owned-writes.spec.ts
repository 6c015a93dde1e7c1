import { describe, expect, it, jest } from '@jest/globals';
import { ClaimHold } from '../claims/claim-hold.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { EndWrites } from './end-writes.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeWriteUnavailableError } from './episode-errors.js';
import type { EpisodeJournal } from './episode-journal.js';
import type { EndOutcome } from './episode-statements.js';
import { OwnedWrites } from './owned-writes.js';
import type { StepRecord, StepWriteOutcome } from './step-ports.interface.js';
import type { StepWrites } from './step-writes.js';

const ownership = { key: 'episode:e1', owner: 'n1', fence: 7 };
const record: StepRecord = {
  stepNo: 1,
  journalNo: 1,
  name: 's1',
  resultJson: '{"v":1}',
  durationMs: 1,
};
const outcome = {
  terminal: { status: 'done' },
  event: { type: 'episode.completed', payload: {} },
} as unknown as EndOutcome;
const episode = { id: 'e1' } as EpisodeRow;
const options = { recovery: { staleAfterMs: 60_000 } } as ResolvedCycliumOptions;

const cut = () =>
  Object.assign(new Error('terminating connection due to administrator command'), {
    code: '57P01',
  });
const lockTimeout = () =>
  Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' });
const duplicate = () =>
  Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' });

type StepCall<R> = (episodeId: string, owner: typeof ownership, step: StepRecord) => Promise<R>;

function setup(
  calls: {
    write?: Array<() => StepWriteOutcome>;
    confirm?: Array<StepWriteOutcome | null>;
    end?: Array<() => [] | null>;
    ended?: Array<'ended' | 'owned' | 'lost'>;
  },
  resolved: ResolvedCycliumOptions = options,
) {
  const steps = {
    write: jest.fn<StepCall<StepWriteOutcome>>(async () =>
      (calls.write?.shift() as () => StepWriteOutcome)(),
    ),
    confirm: jest.fn<StepCall<StepWriteOutcome | null>>(async () => calls.confirm?.shift() ?? null),
  };
  const ends = {
    end: jest.fn(async () => (calls.end?.shift() as () => [] | null)()),
    confirm: jest.fn(async () => calls.ended?.shift() ?? 'owned'),
  };
  const writes = new OwnedWrites(
    steps as unknown as StepWrites,
    ends as unknown as EndWrites,
    {} as EpisodeJournal,
    resolved,
  );
  return { steps, ends, writes };
}

const held = () => new ClaimHold('episode:e1', 7, 60_000, performance.now());

describe('OwnedWrites', () => {
  it('a step write whose reply was lost is found committed and not sent again', async () => {
    const { steps, writes } = setup({
      write: [
        () => {
          throw cut();
        },
      ],
      confirm: ['written'],
    });
    await expect(writes.step(writes.scope('e1', held()), ownership, record)).resolves.toBe(
      'written',
    );
    expect(steps.write).toHaveBeenCalledTimes(1);
    expect(steps.confirm).toHaveBeenCalledWith('e1', ownership, record);
  });

  it(
    'with claims off, a write of a run older than the staleness window still retries: the ' +
      'window starts at its failure',
    async () => {
      const { steps, writes } = setup(
        {
          write: [
            () => {
              throw cut();
            },
            () => 'written',
          ],
          confirm: [null],
        },
        { recovery: { staleAfterMs: 50 } } as ResolvedCycliumOptions,
      );
      const scope = writes.scope('e1', new ClaimHold('episode:e1', null, 0, performance.now()));
      // the run has lasted longer than staleAfterMs
      await new Promise((resolve) => setTimeout(resolve, 80));
      await expect(writes.step(scope, ownership, record)).resolves.toBe('written');
      expect(steps.write).toHaveBeenCalledTimes(2);
    },
  );

  it(
    'a step write that did not commit is sent again with the same fence; a lock timeout is ' +
      'transient too',
    async () => {
      const { steps, writes } = setup({
        write: [
          () => {
            throw lockTimeout();
          },
          () => 'written',
        ],
        confirm: [null],
      });
      await expect(writes.step(writes.scope('e1', held()), ownership, record)).resolves.toBe(
        'written',
      );
      expect(steps.write).toHaveBeenNthCalledWith(2, 'e1', ownership, record);
    },
  );

  it(
    'on a later attempt, a unique violation means the lost attempt committed meanwhile: the ' +
      'next confirm says so',
    async () => {
      const { writes } = setup({
        write: [
          () => {
            throw cut();
          },
          () => {
            throw duplicate();
          },
        ],
        confirm: [null, 'cancel_requested'],
      });
      await expect(writes.step(writes.scope('e1', held()), ownership, record)).resolves.toBe(
        'cancel_requested',
      );
    },
  );

  it(
    "the host's kind of error is not retried: a first attempt's unique violation or a bad value " +
      'goes through',
    async () => {
      const { steps, writes } = setup({
        write: [
          () => {
            throw duplicate();
          },
        ],
      });
      await expect(
        writes.step(writes.scope('e1', held()), ownership, record),
      ).rejects.toMatchObject({
        code: '23505',
      });
      expect(steps.confirm).not.toHaveBeenCalled();
    },
  );

  it('once the claim is lost, it stops retrying and leaves the episode to recovery', async () => {
    const hold = held();
    const { writes } = setup({
      write: [
        () => {
          hold.markLost('deadline');
          throw cut();
        },
      ],
    });
    await expect(writes.step(writes.scope('e1', hold), ownership, record)).rejects.toBeInstanceOf(
      EpisodeWriteUnavailableError,
    );
  });

  it(
    'an end found committed by this owner at this fence (before or after sending it again) is a ' +
      'success, not a lost claim; one found lost is null',
    async () => {
      const ended = setup({
        end: [
          () => {
            throw cut();
          },
        ],
        ended: ['ended'],
      });
      await expect(
        ended.writes.end(ended.writes.scope('e1', held()), episode, ownership, outcome),
      ).resolves.toEqual([]);
      expect(ended.ends.end).toHaveBeenCalledTimes(1);
      const late = setup({
        end: [
          () => {
            throw cut();
          },
          () => null,
        ],
        ended: ['owned', 'ended'],
      });
      await expect(
        late.writes.end(late.writes.scope('e1', held()), episode, ownership, outcome),
      ).resolves.toEqual([]);
      const lost = setup({
        end: [
          () => {
            throw cut();
          },
        ],
        ended: ['lost'],
      });
      await expect(
        lost.writes.end(lost.writes.scope('e1', held()), episode, ownership, outcome),
      ).resolves.toBeNull();
    },
  );

  it(
    'a wait write (a backoff, a sleep) is retried through a fault: found committed, or written ' +
      'again',
    async () => {
      const { writes } = setup({});
      const answers = (...results: Array<boolean | Error>) =>
        jest.fn(async () => {
          const next = results.shift();
          if (next instanceof Error) throw next;
          return next as boolean;
        });
      const scope = writes.scope('e1', held());
      const lostReply = { write: answers(cut()), committed: answers(true) };
      await expect(
        writes.wait(scope, 'retry wait', lostReply.write, lostReply.committed),
      ).resolves.toBe(true);
      expect(lostReply.write).toHaveBeenCalledTimes(1);
      const refused = { write: answers(lockTimeout(), true), committed: answers(false) };
      await expect(writes.wait(scope, 'sleep', refused.write, refused.committed)).resolves.toBe(
        true,
      );
      expect(refused.write).toHaveBeenCalledTimes(2);
      // Sent again after an attempt that was still running there and committed first: the second
      // finds nothing to move.
      const late = { write: answers(cut(), false), committed: answers(false, true) };
      await expect(writes.wait(scope, 'sleep', late.write, late.committed)).resolves.toBe(true);
      const gone = { write: answers(cut(), false), committed: answers(false, false) };
      await expect(writes.wait(scope, 'sleep', gone.write, gone.committed)).resolves.toBe(false);
    },
  );
});
