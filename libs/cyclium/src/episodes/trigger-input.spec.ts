import { describe, expect, it } from '@jest/globals';
import { InvalidTriggerError } from './episode-errors.js';
import { triggerDelay } from './trigger-input.js';

describe('triggerDelay', () => {
  it(
    "runs now with delayMs 0, and leaves the expectation's default to the dispatcher when the " +
      'trigger asks for nothing',
    () => {
      expect(triggerDelay('t', { delayMs: 0 })).toBeNull();
      expect(triggerDelay('t', {})).toBeUndefined();
    },
  );

  it("takes the trigger's delayMs or runAt", () => {
    const at = new Date('2030-01-01T00:00:00Z');
    expect(triggerDelay('t', { delayMs: 250 })).toEqual({ ms: 250 });
    expect(triggerDelay('t', { runAt: at })).toEqual({ at });
  });

  it.each([
    [{ delayMs: -1 }, 'delayMs', 't: delayMs must be a whole number of milliseconds >= 0 (got -1)'],
    [
      { delayMs: 1.5 },
      'delayMs',
      't: delayMs must be a whole number of milliseconds >= 0 (got 1.5)',
    ],
    [
      { delayMs: '10' },
      'delayMs',
      't: delayMs must be a whole number of milliseconds >= 0 (got "10")',
    ],
    [{ runAt: '2030-01-01' }, 'runAt', 't: runAt must be a valid Date (got "2030-01-01")'],
    [{ runAt: new Date('nonsense') }, 'runAt', 't: runAt must be a valid Date (got null)'],
    [{ delayMs: 10, runAt: new Date() }, 'runAt', 't: give delayMs or runAt, not both'],
  ])('refuses %j naming the field', (asked, field, message) => {
    let thrown: unknown;
    try {
      triggerDelay('t', asked);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidTriggerError);
    expect(thrown).toMatchObject({ name: 'InvalidTriggerError', field, message });
  });
});
