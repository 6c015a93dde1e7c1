import { describe, expect, it, jest } from '@jest/globals';
import { ClaimHold } from './claim-hold.js';
import { ClaimLostError } from './claim-lost.error.js';

const LEASE_MS = 60_000;

/** A hold whose local deadline passed a millisecond ago: no waiting needed. */
const overdue = (onRelease?: (hold: ClaimHold) => void) =>
  new ClaimHold('k', 4, LEASE_MS, performance.now() - LEASE_MS - 1, onRelease);

/** A hold whose local deadline is a whole lease away. */
const fresh = (onRelease?: (hold: ClaimHold) => void) =>
  new ClaimHold('k', 4, LEASE_MS, performance.now(), onRelease);

function thrownBy(fn: () => void): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('ClaimHold', () => {
  it('a passthrough hold (fence null) is never lost, however far past any deadline', () => {
    const onRelease = jest.fn();
    const hold = new ClaimHold('k', null, 1, performance.now() - 1e12, onRelease);
    expect(hold.localDeadline).toBe(Number.POSITIVE_INFINITY);
    expect(hold.lost).toBe(false);
    expect(() => hold.check()).not.toThrow();
    hold.renewed(performance.now() - 1e12);
    expect(hold.localDeadline).toBe(Number.POSITIVE_INFINITY);
    expect(hold.lost).toBe(false);
    expect(hold.signal.aborted).toBe(false);
    expect(onRelease).not.toHaveBeenCalled();
  });

  it('a fenced hold is live before its deadline', () => {
    const hold = fresh();
    expect(hold.lost).toBe(false);
    expect(() => hold.check()).not.toThrow();
    expect(hold.signal.aborted).toBe(false);
  });

  it('a fenced hold is lost once performance.now() passes sentAt + leaseMs, and says why', () => {
    const onRelease = jest.fn();
    const sentAt = performance.now() - LEASE_MS - 1;
    const hold = new ClaimHold('k', 4, LEASE_MS, sentAt, onRelease);
    expect(hold.localDeadline).toBe(sentAt + LEASE_MS);

    expect(hold.lost).toBe(true);
    expect(hold.signal.aborted).toBe(true);
    expect(hold.signal.reason).toBeInstanceOf(ClaimLostError);
    expect(hold.signal.reason).toMatchObject({
      name: 'ClaimLostError',
      key: 'k',
      fence: 4,
      reason: 'deadline',
    });
    expect(onRelease).toHaveBeenCalledTimes(1);
    expect(onRelease).toHaveBeenCalledWith(hold);
  });

  it('check() throws a ClaimLostError with reason deadline once the deadline has passed', () => {
    const hold = overdue();
    const error = thrownBy(() => hold.check());
    expect(error).toBeInstanceOf(ClaimLostError);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ name: 'ClaimLostError', key: 'k', fence: 4, reason: 'deadline' });
    expect((error as Error).message).toContain('no renewal succeeded before the local deadline');
    expect(error).toBe(hold.signal.reason);
  });

  it('renewed(sentAt) moves the deadline forward, so an overdue-looking hold stays live', () => {
    const oldSentAt = performance.now() - LEASE_MS - 1;
    const hold = new ClaimHold('k', 4, LEASE_MS, oldSentAt);
    const renewedAt = performance.now();
    hold.renewed(renewedAt);
    expect(hold.localDeadline).toBe(renewedAt + LEASE_MS);
    expect(hold.lost).toBe(false);
    expect(() => hold.check()).not.toThrow();
  });

  it('renewed() never moves the deadline backwards', () => {
    const sentAt = performance.now();
    const hold = new ClaimHold('k', 4, LEASE_MS, sentAt);
    hold.renewed(sentAt - 10_000);
    expect(hold.localDeadline).toBe(sentAt + LEASE_MS);
  });

  it('renewed() does not revive a lost hold', () => {
    const hold = overdue();
    expect(hold.lost).toBe(true);
    const deadline = hold.localDeadline;
    hold.renewed(performance.now());
    expect(hold.localDeadline).toBe(deadline);
    expect(hold.lost).toBe(true);
    expect(() => hold.check()).toThrow(ClaimLostError);
  });

  it(
    "markLost('not_owner') aborts the signal with a ClaimLostError and releases exactly " + 'once',
    () => {
      const onRelease = jest.fn();
      const hold = fresh(onRelease);
      const aborts = jest.fn();
      hold.signal.addEventListener('abort', aborts);

      hold.markLost('not_owner');
      hold.markLost('not_owner');
      hold.markLost('deadline');
      hold.release();

      expect(hold.signal.aborted).toBe(true);
      expect(hold.signal.reason).toBeInstanceOf(ClaimLostError);
      expect(hold.signal.reason).toMatchObject({
        name: 'ClaimLostError',
        key: 'k',
        fence: 4,
        reason: 'not_owner',
      });
      expect((hold.signal.reason as Error).message).toContain('no longer shows it held here');
      expect(onRelease).toHaveBeenCalledTimes(1);
      expect(onRelease).toHaveBeenCalledWith(hold);
      expect(aborts).toHaveBeenCalledTimes(1);
      expect(hold.lost).toBe(true);

      const error = thrownBy(() => hold.check());
      expect(error).toBe(hold.signal.reason);
      expect(error).toMatchObject({ reason: 'not_owner' });
    },
  );

  it(
    'release() stops renewing once, counts as lost, and builds no error until someone ' + 'checks',
    () => {
      const onRelease = jest.fn();
      const hold = fresh(onRelease);
      hold.release();
      hold.release();
      expect(onRelease).toHaveBeenCalledTimes(1);
      expect(hold.lost).toBe(true);
      // The success path allocates nothing: the signal is left alone.
      expect(hold.signal.aborted).toBe(false);
      let thrown: unknown;
      try {
        hold.check();
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(ClaimLostError);
      expect(thrown).toMatchObject({
        name: 'ClaimLostError',
        reason: 'released',
        key: 'k',
        fence: 4,
      });
      // A lost hold released afterwards keeps its reason.
      const lost = fresh();
      lost.markLost('not_owner');
      lost.release();
      expect(lost.signal.reason).toMatchObject({ reason: 'not_owner' });
    },
  );

  it('a passthrough hold can still be released explicitly', () => {
    const hold = new ClaimHold('k', null, LEASE_MS, performance.now());
    hold.release();
    expect(hold.lost).toBe(true);
    expect(() => hold.check()).toThrow(
      expect.objectContaining({ reason: 'released', fence: null }),
    );
  });
});
