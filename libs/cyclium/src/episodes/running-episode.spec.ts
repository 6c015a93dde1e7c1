import { describe, expect, it, jest } from '@jest/globals';
import type { EntityManager } from 'typeorm';
import { ClaimHold } from '../claims/claim-hold.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeWaiting, NondeterministicResumeError } from './episode-errors.js';
import { RunningEpisode, type RunningEpisodeDeps } from './running-episode.js';
import type {
  History,
  TransactionStep,
  TransactionStepOutcome,
  WaitStep,
  WaitStepOutcome,
} from './step-ports.interface.js';
import { ChildEpisodesFailedError } from './wait-errors.js';

const MANAGER = {} as EntityManager;

/** A run whose transaction steps call `run` with a stand-in manager and answer `outcome`. */
function running(
  options: {
    history?: History;
    outcome?: TransactionStepOutcome['outcome'];
    wait?: WaitStepOutcome;
  } = {},
) {
  const transactions: TransactionStep[] = [];
  const waits: WaitStep[] = [];
  const writes: number[] = [];
  const deps: RunningEpisodeDeps = {
    episode: { id: 'e-1', cancelRequestedAt: null } as unknown as EpisodeRow,
    trigger: { type: 'manual', payload: {} },
    fence: 3,
    resumed: options.history !== undefined,
    hold: new ClaimHold('k', 3, 60_000, performance.now()),
    history: options.history ?? { checkpoints: new Map(), nextJournalNo: 1 },
    budget: undefined,
    writeStep: async (record) => {
      writes.push(record.journalNo);
      return 'written';
    },
    transactionStep: async (step) => {
      transactions.push(step);
      const result = await step.run(MANAGER);
      return { outcome: options.outcome ?? 'written', result, durationMs: 1 };
    },
    waitStep: async (step) => {
      waits.push(step);
      return options.wait ?? { outcome: 'waiting', deadline: null };
    },
    startChild: async (_manager, child) => ({
      episodeId: `child-${child.key}`,
      actorId: child.actorId,
      expectationId: child.expectationId,
      key: child.key,
    }),
  };
  return { ep: new RunningEpisode(deps), transactions, writes, waits };
}

describe('RunningEpisode.transaction', () => {
  it('runs the host function with its manager at the next journal position', async () => {
    const { ep, transactions, writes } = running();
    await ep.step('first', () => 1);
    const seen = jest.fn<(manager: EntityManager) => void>();
    const result = await ep.transaction('book', async (manager, tools) => {
      seen(manager);
      return { stepNo: tools.stepNo, key: tools.idempotencyKey };
    });
    expect(result).toEqual({ stepNo: 2, key: 'e-1:2' });
    expect(seen).toHaveBeenCalledWith(MANAGER);
    expect(transactions.map((t) => [t.stepNo, t.journalNo, t.name])).toEqual([[2, 2, 'book']]);
    await ep.step('third', () => 3);
    // The first step was written before the transaction; the last waits for the end.
    expect(writes).toEqual([1]);
    expect(ep.takeUnwritten()).toMatchObject({ stepNo: 3, journalNo: 3, name: 'third' });
  });

  it('a resumed run returns the recorded result without calling the function', async () => {
    const history: History = {
      checkpoints: new Map([[1, { name: 'book', state: { booked: true } }]]),
      nextJournalNo: 3,
    };
    const { ep, transactions } = running({ history });
    const fn = jest.fn(async () => ({ booked: false }));
    await expect(ep.transaction('book', fn)).resolves.toEqual({ booked: true });
    expect(fn).not.toHaveBeenCalled();
    expect(transactions).toHaveLength(0);
  });

  it('a recorded step of another name fails the resume', async () => {
    const history: History = {
      checkpoints: new Map([[1, { name: 'charge', state: null }]]),
      nextJournalNo: 2,
    };
    const { ep } = running({ history });
    await expect(ep.transaction('book', async () => null)).rejects.toThrow(
      NondeterministicResumeError,
    );
  });

  it('a failed function uses up no journal position', async () => {
    const { ep, writes } = running();
    await expect(
      ep.transaction('book', async () => {
        throw new Error('host failure');
      }),
    ).rejects.toThrow('host failure');
    await ep.step('next', () => 1);
    await ep.flushUnwritten();
    expect(writes).toEqual([1]);
  });

  it('writes a finished step before the next call, or leaves it to the end', async () => {
    const { ep, writes } = running();
    await ep.step('one', () => 1);
    expect(writes).toEqual([]);
    await ep.step('two', () => 2);
    expect(writes).toEqual([1]);
    await ep.sleep('nap', 0);
    // A sleep's wake-up time is journaled before the run could stop to sleep.
    expect(writes).toEqual([1, 2, 3]);
    await ep.step('last', () => 4);
    expect(ep.takeUnwritten()).toMatchObject({ stepNo: 4, journalNo: 4, name: 'last' });
    expect(writes).toEqual([1, 2, 3]);
  });

  it('refuses a step or a transaction inside a transaction step', async () => {
    const { ep } = running();
    await expect(ep.transaction('outer', () => ep.step('inner', () => 1))).rejects.toThrow(
      /cannot run inside ep.transaction/,
    );
    await expect(
      ep.transaction('outer-2', () => ep.transaction('inner', async () => 1)),
    ).rejects.toThrow(/cannot run inside another step/);
    await expect(
      ep.step('plain', () => ep.transaction('inside-a-step', async () => 1)),
    ).rejects.toThrow(/cannot run inside another step/);
    // None left the run stuck inside a step.
    await expect(ep.step('after', () => 'ok')).resolves.toBe('ok');
  });

  it('a write refused on the fence stops the run with ClaimLostError', async () => {
    const { ep } = running({ outcome: 'not_owner' });
    await expect(ep.transaction('book', async () => 1)).rejects.toThrow(ClaimLostError);
    expect(ep.signal.aborted).toBe(true);
  });

  it('a wait not yet satisfied stops the run quietly, the episode waiting', async () => {
    const { ep, waits } = running();
    await expect(ep.waitForSignal('approve', { timeoutMs: 5 })).rejects.toBeInstanceOf(
      EpisodeWaiting,
    );
    expect(waits[0]).toMatchObject({
      stepNo: 1,
      name: 'signal:approve',
      wait: { kind: 'signal', name: 'approve', timeoutMs: 5 },
    });
    expect(ep.signal.aborted).toBe(true);
  });

  it('a satisfied wait is journaled at its position and returns its result', async () => {
    const received = { status: 'received', payload: { by: 'ann' }, signalId: '1', sentAt: 'x' };
    const { ep, waits } = running({ wait: { outcome: 'written', result: received } });
    await expect(ep.waitForSignal('approve')).resolves.toEqual(received);
    await expect(
      ep.waitForEvent('payment.settled', { match: { orderId: 'o-1' } }),
    ).resolves.toEqual(received);
    expect(waits.map((w) => [w.stepNo, w.journalNo])).toEqual([
      [1, 1],
      [2, 2],
    ]);
  });

  it('a replayed wait returns its recorded result without waiting again', async () => {
    const history: History = {
      checkpoints: new Map([
        [1, { name: 'signal:approve', state: { status: 'timed_out' } } as never],
      ]),
      nextJournalNo: 2,
    };
    const { ep, waits } = running({ history });
    await expect(ep.waitForSignal('approve')).resolves.toEqual({ status: 'timed_out' });
    expect(waits).toEqual([]);
  });

  it('refuses waits inside a step and bad wait arguments', async () => {
    const { ep } = running();
    await expect(ep.step('outer', () => ep.waitForSignal('x'))).rejects.toThrow(
      /cannot run inside a step/,
    );
    await expect(ep.waitForSignal('x', { timeoutMs: -1 })).rejects.toThrow(RangeError);
    await expect(
      ep.waitForEvent('t', { match: { nested: {} as unknown as string } }),
    ).rejects.toThrow(/match must be an object/);
    await expect(ep.startChild('a', 'b', {}, { key: '' })).rejects.toThrow(/key must be/);
    await expect(ep.waitForEvent('episode.completed')).rejects.toThrow(/library event type/);
  });

  it('a children wait whose child failed throws a typed error the method can catch', async () => {
    const children = [
      { episodeId: 'c1', status: 'done', result: 1, errorClass: null, error: null },
      { episodeId: 'c2', status: 'failed', result: null, errorClass: 'Error', error: 'boom' },
    ];
    const { ep } = running({
      wait: { outcome: 'written', result: { status: 'done', children } },
    });
    const handle = await ep.startChild('a', 'b', {}, { key: 'k' });
    expect(handle).toEqual({ episodeId: 'child-k', actorId: 'a', expectationId: 'b', key: 'k' });
    const failure = await ep.waitForChildren([handle]).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ChildEpisodesFailedError);
    expect((failure as ChildEpisodesFailedError).failed.map((c) => c.episodeId)).toEqual(['c2']);
  });
});
