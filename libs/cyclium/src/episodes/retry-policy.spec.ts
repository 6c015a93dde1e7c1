import { describe, expect, it } from '@jest/globals';
import type { EpisodeRow } from './episode-context.interface.js';
import { retryDelayMs, retryOptionsFor } from './retry-policy.js';

const episode = (triggerRef: Record<string, unknown>) =>
  ({ id: 'e', triggerRef }) as unknown as EpisodeRow;
const declared = { retry: { attempts: 3 }, retryable: () => true };

describe('retryOptionsFor', () => {
  it("goes by the expectation's policy when the trigger gave none", () => {
    expect(retryOptionsFor(episode({ type: 'manual', payload: {} }), declared)).toEqual({
      options: declared,
    });
  });

  it(
    "puts the trigger's policy over the expectation's, keeping its retryable hook; false turns " +
      'retries off',
    () => {
      const own = { attempts: 5, backoff: { initialMs: 10 } };
      expect(retryOptionsFor(episode({ retry: own }), declared)).toEqual({
        options: { retry: own, retryable: declared.retryable },
      });
      expect(retryOptionsFor(episode({ retry: false }), declared)).toEqual({ options: undefined });
    },
  );

  it(
    "falls back to the expectation's policy, saying why, when the stored one is not sound (a " +
      'row edited by hand)',
    () => {
      expect(retryOptionsFor(episode({ retry: { attempts: 'many' } }), declared)).toEqual({
        options: declared,
        problem:
          "its trigger's retry.attempts must be a whole number >= 2 (runs in all, the first " +
          'included)',
      });
    },
  );
});

describe('retryDelayMs', () => {
  it('doubles from initialMs up to maxMs, plus the jitter share', () => {
    const policy = { attempts: 9, backoff: { initialMs: 100, factor: 2, maxMs: 350 }, jitter: 0.5 };
    expect([0, 1, 2, 3].map((n) => retryDelayMs(policy, n, () => 0))).toEqual([100, 200, 350, 350]);
    expect(retryDelayMs(policy, 1, () => 1)).toBe(300);
  });
});
