import { describe, expect, it, jest } from '@jest/globals';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { EpisodeRunner, BeginResult } from '../episodes/episode-runner.service.js';
import type { EpisodeQueue } from '../episodes/episode-queue.js';
import type { FlowAdmissions } from '../episodes/flow-admissions.js';
import { FlowQuiet } from '../episodes/flow-quiet.js';
import type { ThrottledInserts } from '../episodes/throttled-inserts.js';
import type { QueuedBegins } from '../episodes/queued-begins.js';
import type { RunOptions } from '../episodes/episode-runner.service.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import type { EpisodeStore } from '../episodes/episode-store.js';
import type { EventOutbox } from '../bus/event-outbox.service.js';
import type { WorkClaims } from '../leases/work-claims.service.js';
import { Mode } from './mode.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredActor } from '../actors/registered-actor.js';
import { ActorSlots } from './actor-slots.service.js';

/**
 * Slots for one actor with `max` slots (one by default), whose begins, dequeues and runs the test
 * answers by hand; `queuedBegins` stands in for the one-statement take when given.
 */
function slotsWithManualQueue(max = 1, queuedBegins: Partial<QueuedBegins> = { available: false }) {
  const options = resolveCycliumOptions({ nodeIdentity: 'slots' });
  const actor = {
    id: 'a',
    options: { maxConcurrentEpisodes: max, overflow: 'queue' },
    expectations: new Map(),
  } as unknown as RegisteredActor;
  const dequeues: Array<(result: BeginResult) => void> = [];
  const takes: Array<(result: BeginResult) => void> = [];
  const runs: Array<() => void> = [];
  const returns: Array<() => void> = [];
  const begins: Array<(result: BeginResult) => void> = [];
  const runner = {
    begin: () => new Promise<BeginResult>((resolve) => begins.push(resolve)),
    beginQueued: () => new Promise<BeginResult>((resolve) => dequeues.push(resolve)),
    beginFromPeer: () => new Promise<BeginResult>((resolve) => takes.push(resolve)),
    run: (_episode: unknown, _expectation: unknown, _grant: unknown, run: RunOptions) => {
      returns.push(() => run.returned?.());
      return new Promise<void>((resolve) => runs.push(resolve));
    },
  };
  const registry = { get: () => actor } as unknown as ActorRegistry;
  const identity = new NodeIdentity(options);
  const slots = new ActorSlots(
    registry,
    runner as unknown as EpisodeRunner,
    {} as EpisodeStore,
    {} as EpisodeQueue,
    queuedBegins as QueuedBegins,
    {} as WorkClaims,
    identity,
    {} as EventOutbox,
    new Mode(options, identity, registry),
    {} as FlowAdmissions,
    {} as ThrottledInserts,
    new FlowQuiet(),
    options,
  );
  return { slots, dequeues, takes, runs, returns, begins };
}

const started = (id: string): BeginResult => ({
  status: 'started',
  episode: { id } as EpisodeRow,
  grant: {} as AcquireResult,
});
const expectation = { actorId: 'a', id: 'x', options: {} } as unknown as RegisteredExpectation;
const busEvent = (onWait?: () => void) => ({
  dedupeKey: null,
  sourceStack: null,
  sourceEnv: null,
  waitForSlot: true,
  onWait,
});

/** Lets pending promise callbacks run, a bounded number of event-loop turns at most. */
async function settles(condition: () => boolean): Promise<boolean> {
  for (let turn = 0; turn < 50 && !condition(); turn++)
    await new Promise((resolve) => setImmediate(resolve));
  return condition();
}

describe('ActorSlots queue', () => {
  it(
    'looks again when a row was queued while a dequeue that came back empty was in ' + 'flight',
    async () => {
      const { slots, dequeues } = slotsWithManualQueue();
      slots.noteQueued('a');
      expect(dequeues).toHaveLength(1);
      // A row is queued (and noted) while that dequeue runs; its snapshot predates the row's
      // commit.
      slots.noteQueued('a');
      dequeues[0]?.({ status: 'duplicate' });

      expect(await settles(() => dequeues.length === 2)).toBe(true);
    },
  );

  it('looks again by itself when the oldest queued row has a claim held elsewhere', async () => {
    jest.useFakeTimers({
      doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask', 'Date', 'performance'],
    });
    try {
      const { slots, dequeues } = slotsWithManualQueue();
      slots.noteQueued('a');
      dequeues[0]?.({ status: 'busy' });
      // Nothing notes the queue when the other node lets the claim go: the slots must come back on
      // their own.
      expect(await settles(() => dequeues.length > 1)).toBe(false);
      jest.advanceTimersByTime(1_000);
      expect(dequeues).toHaveLength(2);
    } finally {
      jest.useRealTimers();
    }
  });

  it('stops looking when a dequeue comes back empty and nothing was queued meanwhile', async () => {
    const { slots, dequeues } = slotsWithManualQueue();
    slots.noteQueued('a');
    dequeues[0]?.({ status: 'duplicate' });

    expect(await settles(() => dequeues.length > 1)).toBe(false);
    slots.noteQueued('a');
    expect(dequeues).toHaveLength(2);
  });
});

describe('ActorSlots taking what full peers offered', () => {
  it('takes rows from peers while a slot is free, until a take comes back empty', async () => {
    const { slots, takes, runs } = slotsWithManualQueue();
    slots.noteOffered('a');
    expect(takes).toHaveLength(1);
    takes[0]?.(started('e1'));
    expect(await settles(() => runs.length === 1)).toBe(true);
    // The slot is busy: no look until the run ends; then it looks again, there may be more.
    expect(takes).toHaveLength(1);
    runs[0]?.();
    expect(await settles(() => takes.length === 2)).toBe(true);
    takes[1]?.({ status: 'duplicate' });
    expect(await settles(() => takes.length > 2)).toBe(false);
    // The next offer starts it again.
    slots.noteOffered('a');
    expect(takes).toHaveLength(3);
  });

  it('waits for a free slot, and runs its own queue before what peers offered', async () => {
    const { slots, dequeues, takes, runs } = slotsWithManualQueue();
    slots.noteQueued('a');
    dequeues[0]?.(started('own'));
    expect(await settles(() => runs.length === 1)).toBe(true);
    slots.noteOffered('a');
    slots.noteQueued('a');
    expect(takes).toHaveLength(0);
    runs[0]?.();
    expect(await settles(() => dequeues.length === 2)).toBe(true);
    expect(takes).toHaveLength(0);
    dequeues[1]?.({ status: 'duplicate' });
    expect(await settles(() => takes.length === 1)).toBe(true);
  });

  it(
    'looks once more when an offer came while a take that came back empty was in ' + 'flight',
    async () => {
      const { slots, takes } = slotsWithManualQueue();
      slots.noteOffered('a');
      slots.noteOffered('a');
      takes[0]?.({ status: 'duplicate' });
      expect(await settles(() => takes.length === 2)).toBe(true);
    },
  );

  it('takes nothing once the node drains', () => {
    const { slots, takes } = slotsWithManualQueue();
    slots.stopAccepting();
    slots.noteOffered('a');
    expect(takes).toHaveLength(0);
  });
});

describe('ActorSlots bus events waiting in memory', () => {
  const trigger = { type: 'event', eventType: 't', eventId: 'e', payload: {} } as const;

  it(
    'holds a bus event while every slot is busy, with no queued row, and starts it when the ' +
      'method returns',
    async () => {
      const { slots, begins, returns, runs } = slotsWithManualQueue();
      const first = slots.dispatch(expectation, trigger, busEvent());
      begins[0]?.(started('e1'));
      expect(await first).toEqual({ status: 'started', episode: { id: 'e1' } });
      const onWait = jest.fn();
      let answer: unknown;
      // The store is empty: a queued insert here would throw.
      void slots
        .dispatch(expectation, trigger, busEvent(onWait))
        .then((result) => (answer = result));
      expect(await settles(() => onWait.mock.calls.length === 1)).toBe(true);
      expect(begins).toHaveLength(1);
      // The first method returned: its end is still being written, and the slot already starts the
      // next.
      returns[0]?.();
      expect(begins).toHaveLength(2);
      begins[1]?.(started('e2'));
      expect(await settles(() => answer !== undefined)).toBe(true);
      expect(answer).toEqual({ status: 'started', episode: { id: 'e2' } });
      expect(runs).toHaveLength(2);
    },
  );

  it('answers busy for every waiting event once the node drains, starting none', async () => {
    const { slots, begins } = slotsWithManualQueue();
    const first = slots.dispatch(expectation, trigger, busEvent());
    begins[0]?.(started('e1'));
    await first;
    const waiting = [
      slots.dispatch(expectation, trigger, busEvent()),
      slots.dispatch(expectation, trigger, busEvent()),
    ];
    slots.stopAccepting();
    expect(await Promise.all(waiting)).toEqual([{ status: 'busy' }, { status: 'busy' }]);
    expect(begins).toHaveLength(1);
  });
});

describe('ActorSlots taking queued rows together', () => {
  it(
    'takes one row per free slot but one in one statement, and leaves that slot to other ' +
      'starters meanwhile',
    async () => {
      let answer!: (rows: never) => void;
      const take = jest.fn<QueuedBegins['take']>(
        () => new Promise<never>((resolve) => (answer = resolve)),
      );
      const { slots, runs, dequeues } = slotsWithManualQueue(4, {
        available: true,
        take: take as QueuedBegins['take'],
      });
      slots.noteQueued('a');
      expect(take).toHaveBeenCalledWith('a', [], 3, 'own');
      // While the take is in flight, a deferred episode the poller found can still start.
      expect(slots.free('a')).toBe(1);
      answer([started('q1'), started('q2')] as never);
      expect(await settles(() => runs.length === 2)).toBe(true);
      // Two of three came back: the queue is empty, nothing more is asked and two slots are free.
      expect(await settles(() => take.mock.calls.length > 1)).toBe(false);
      expect(dequeues).toHaveLength(0);
      expect(slots.free('a')).toBe(2);
    },
  );
});

describe('ActorSlots telling who listens that a slot freed', () => {
  it('names the actor of each slot that frees, and nothing once the node drains', async () => {
    const { slots, runs } = slotsWithManualQueue(2);
    const freed: string[] = [];
    slots.onSlotFreed((actorId) => freed.push(actorId));
    const begun = {
      episode: { id: 'd1' } as EpisodeRow,
      grant: {} as AcquireResult,
      resumed: false,
    };
    const start = () => Promise.resolve(begun);
    expect(slots.runStarted('a', start)).toBe(true);
    expect(slots.runStarted('a', () => Promise.resolve(null))).toBe(true);
    // The start that found nothing to run gives its slot back at once; the run's, when it ends.
    expect(await settles(() => freed.length === 1 && runs.length === 1)).toBe(true);
    runs[0]?.();
    expect(await settles(() => freed.length === 2)).toBe(true);
    expect(freed).toEqual(['a', 'a']);
    // A run that ends once the drain began frees a slot nobody may fill.
    expect(slots.runStarted('a', start)).toBe(true);
    expect(await settles(() => runs.length === 2)).toBe(true);
    slots.stopAccepting();
    runs[1]?.();
    expect(await settles(() => freed.length > 2)).toBe(false);
  });
});
