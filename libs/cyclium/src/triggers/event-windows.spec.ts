import { describe, expect, it, jest } from '@jest/globals';
import type { BusEvent } from '../bus/bus.interface.js';
import type { EventReceipt } from '../bus/durable-subscriptions.interface.js';
import { EventWindows } from './event-windows.js';

const event = (id: string): BusEvent => ({ type: 't', eventId: id, payload: {}, publishedAt: '' });

/**
 * A receipt for an event committed at `committedAt`, read now with the database clock at `dbNow`.
 */
const receipt = (committedAt: number, dbNow: number): EventReceipt => ({
  committedAt,
  ageMs: dbNow - committedAt,
  readAt: performance.now(),
});

const rules = (debounceMs: number, cooldownMs: number) => ({ debounceMs, cooldownMs });

describe('EventWindows', () => {
  it(
    'groups a replay by committed time: a gap of a debounce or more closes the window, whenever ' +
      'the events are read',
    async () => {
      const windows = new EventWindows();
      const fired: string[] = [];
      const fire = async (e: BusEvent) => (fired.push(e.eventId), true);
      // All read at once, long after they committed (a node that boots after a stop).
      const settled = [
        windows.admit('s', event('a'), receipt(0, 60_000), rules(3_000, 0), fire),
        windows.admit('s', event('b'), receipt(2_000, 60_000), rules(3_000, 0), fire),
        windows.admit('s', event('c'), receipt(6_000, 60_000), rules(3_000, 0), fire),
      ];
      await Promise.all(settled);
      expect(fired).toEqual(['b', 'c']);
    },
  );

  it(
    'fires a live window a debounce after its last event committed, not after it was ' + 'read',
    async () => {
      jest.useFakeTimers({ doNotFake: ['performance'] });
      try {
        const windows = new EventWindows();
        const fired: string[] = [];
        // Committed 2.5 s before it was read: 0.5 s of the 3 s window is left.
        const fire = async (e: BusEvent) => (fired.push(e.eventId), true);
        void windows.admit('s', event('a'), receipt(10_000, 12_500), rules(3_000, 0), fire);
        jest.advanceTimersByTime(400);
        expect(fired).toEqual([]);
        jest.advanceTimersByTime(200);
        expect(fired).toEqual(['a']);
      } finally {
        jest.useRealTimers();
      }
    },
  );

  it('ignores what commits within a cooldown of the firing, by committed time', async () => {
    const windows = new EventWindows();
    const fired: string[] = [];
    const fire = async (e: BusEvent) => (fired.push(e.eventId), true);
    await windows.admit('s', event('a'), receipt(0, 100), rules(0, 1_000), fire);
    await windows.admit('s', event('b'), receipt(900, 1_000), rules(0, 1_000), fire);
    await windows.admit('s', event('c'), receipt(1_100, 1_200), rules(0, 1_000), fire);
    expect(fired).toEqual(['a', 'c']);
    windows.clear();
  });

  it(
    "drops the windows of one prefix (a paused subscription's), and a window fires with its " +
      "last event's fire",
    async () => {
      jest.useFakeTimers({ doNotFake: ['performance'] });
      try {
        const windows = new EventWindows();
        const fired: string[] = [];
        const before = async (e: BusEvent) => (fired.push(`before:${e.eventId}`), true);
        const after = async (e: BusEvent) => (fired.push(`after:${e.eventId}`), true);
        const settled: string[] = [];
        void windows
          .admit('x\u0000s', event('a'), receipt(0, 0), rules(1_000, 0), before)
          .then(() => settled.push('a'));
        void windows
          .admit('y\u0000s', event('k'), receipt(0, 0), rules(1_000, 0), before)
          .then(() => settled.push('k'));
        // The subscription of `x` paused and resumed: its open window is gone with its timer; `y`'s
        // stays.
        windows.clear('x\u0000');
        void windows.admit('x\u0000s', event('b'), receipt(100, 100), rules(1_000, 0), after);
        void windows.admit('y\u0000s', event('l'), receipt(200, 200), rules(1_000, 0), after);
        await jest.advanceTimersByTimeAsync(1_500);
        expect(fired.sort()).toEqual(['after:b', 'after:l']);
        expect(settled).toEqual(['k']);
      } finally {
        jest.useRealTimers();
      }
    },
  );

  it(
    'closes a window only after a read that began at its time: an event that read brings joins ' +
      'it',
    async () => {
      jest.useFakeTimers({ doNotFake: ['performance'] });
      try {
        const windows = new EventWindows();
        const fired: string[] = [];
        const fire = async (e: BusEvent) => (fired.push(e.eventId), true);
        let reads = 0;
        // The node's reads lag: `b`, committed 300 ms after `a`, comes with the read the window
        // asks for.
        const readThrough = async () => {
          reads++;
          if (reads === 1)
            void windows.admit(
              's',
              event('b'),
              receipt(300, 1_000),
              { ...rules(800, 0), readThrough },
              fire,
            );
        };
        const a = windows.admit(
          's',
          event('a'),
          receipt(0, 0),
          { ...rules(800, 0), readThrough },
          fire,
        );
        await jest.advanceTimersByTimeAsync(1_500);
        expect(fired).toEqual(['b']);
        expect(reads).toBe(2);
        await a;
      } finally {
        jest.useRealTimers();
      }
    },
  );

  it(
    'asks the table once about a cooldown begun before this node read, and admits the events ' +
      'behind it',
    async () => {
      const windows = new EventWindows();
      const fired: string[] = [];
      const fire = async (e: BusEvent) => (fired.push(e.eventId), true);
      let answer: (firedAt: number | null) => void = () => undefined;
      const asked: string[] = [];
      const history = (_subject: string, e: BusEvent) => {
        asked.push(e.eventId);
        return asked.length === 1
          ? new Promise<number | null>((resolve) => (answer = resolve))
          : null;
      };
      const cooling = { debounceMs: 0, cooldownMs: 1_000, history };
      const b = windows.admit('s', event('b'), receipt(500, 600), cooling, fire);
      const c = windows.admit('s', event('c'), receipt(1_300, 1_400), cooling, fire);
      await Promise.resolve();
      expect(fired).toEqual([]);
      // Another node fired the subject at 200: b (at 500) is within its cooldown, c (at 1 300) is
      // not.
      answer(200);
      await Promise.all([b, c]);
      expect(fired).toEqual(['c']);
      expect(asked).toEqual(['b']);
      windows.clear();
    },
  );

  it(
    'leaves every event of a window unsettled when its trigger did not settle, and rejects them ' +
      'all for a reason of its own',
    async () => {
      const windows = new EventWindows();
      const outcomes: string[] = [];
      const track = (p: Promise<void>, name: string) =>
        void p.then(
          () => outcomes.push(`${name} settled`),
          () => outcomes.push(`${name} skipped`),
        );
      track(
        windows.admit('s', event('a'), receipt(0, 10_000), rules(100, 0), async () => false),
        'a',
      );
      track(
        windows.admit('s', event('b'), receipt(50, 10_000), rules(100, 0), async () => false),
        'b',
      );
      track(
        windows.admit('t', event('c'), receipt(0, 10_000), rules(100, 0), async () =>
          Promise.reject(new Error('bad')),
        ),
        'c',
      );
      track(
        windows.admit('t', event('d'), receipt(50, 10_000), rules(100, 0), async () =>
          Promise.reject(new Error('bad')),
        ),
        'd',
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(outcomes.sort()).toEqual(['c skipped', 'd skipped']);
    },
  );
});
