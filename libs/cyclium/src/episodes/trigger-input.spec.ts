import { describe, expect, it } from '@jest/globals';
import { InvalidTriggerError } from './episode-errors.js';
import { triggerDelay } from './trigger-input.js';

describe('triggerDelay', () => {
  it('runs now without a delay, with delayMs 0, and without an expectation default', () => {
    expect(triggerDelay('t', {}, undefined)).toBeNull();
    expect(triggerDelay('t', { delayMs: 0 }, 5_000)).toBeNull();
  });

  it("takes the trigger's delayMs or runAt over the expectation's default", () => {
    const at = new Date('2030-01-01T00:00:00Z');
    expect(triggerDelay('t', {}, 5_000)).toEqual({ ms: 5_000 });
    expect(triggerDelay('t', { delayMs: 250 }, 5_000)).toEqual({ ms: 250 });
    expect(triggerDelay('t', { runAt: at }, 5_000)).toEqual({ at });
  });

  it.each([
    [{ delayMs: -1 }, 'delayMs', 't: delayMs must be a whole number of milliseconds >= 0 (got -1)'],
    [{ delayMs: 1.5 }, 'delayMs', 't: delayMs must be a whole number of milliseconds >= 0 (got 1.5)'],
    [{ delayMs: '10' }, 'delayMs', 't: delayMs must be a whole number of milliseconds >= 0 (got "10")'],
    [{ runAt: '2030-01-01' }, 'runAt', 't: runAt must be a valid Date (got "2030-01-01")'],
    [{ runAt: new Date('nonsense') }, 'runAt', 't: runAt must be a valid Date (got null)'],
    [{ delayMs: 10, runAt: new Date() }, 'runAt', 't: give delayMs or runAt, not both'],
  ])('refuses %j naming the field', (asked, field, message) => {
    let thrown: unknown;
    try {
      triggerDelay('t', asked, undefined);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidTriggerError);
    expect(thrown).toMatchObject({ name: 'InvalidTriggerError', field, message });
  });
});
