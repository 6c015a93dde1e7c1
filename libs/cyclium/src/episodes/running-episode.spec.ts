import { describe, expect, it, jest } from '@jest/globals';
import type { EntityManager } from 'typeorm';
import { ClaimHold } from '../claims/claim-hold.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { NondeterministicResumeError } from './episode-errors.js';
import {
  RunningEpisode,
  type History,
  type RunningEpisodeDeps,
  type TransactionStep,
  type TransactionStepOutcome,
} from './running-episode.js';

const MANAGER = {} as EntityManager;

/** A run whose transaction steps call `run` with a stand-in manager and answer `outcome`. */
function running(
  options: {
    history?: History;
    outcome?: TransactionStepOutcome['outcome'];
  } = {},
) {
  const transactions: TransactionStep[] = [];
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
  };
  return { ep: new RunningEpisode(deps), transactions, writes };
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
    expect(writes).toEqual([1, 3]);
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
    expect(writes).toEqual([1]);
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
});
