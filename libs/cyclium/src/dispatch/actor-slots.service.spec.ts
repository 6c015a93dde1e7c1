import { describe, expect, it, jest } from '@jest/globals';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { EpisodeRunner, BeginResult } from '../episodes/episode-runner.service.js';
import type { EpisodeQueue } from '../episodes/episode-queue.js';
import type { EpisodeStore } from '../episodes/episode-store.js';
import type { EventOutbox } from '../bus/event-outbox.service.js';
import type { WorkClaims } from '../leases/work-claims.service.js';
import { Mode } from './mode.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredActor } from '../actors/registered-actor.js';
import { ActorSlots } from './actor-slots.service.js';

/** Slots for one actor with one slot, whose dequeues the test answers by hand. */
function slotsWithManualQueue() {
  const options = resolveCycliumOptions({ nodeIdentity: 'slots' });
  const actor = { id: 'a', options: { maxConcurrentEpisodes: 1 }, expectations: new Map() } as unknown as RegisteredActor;
  const dequeues: Array<(result: BeginResult) => void> = [];
  const takes: Array<(result: BeginResult) => void> = [];
  const runs: Array<() => void> = [];
  const runner = {
    beginQueued: () => new Promise<BeginResult>((resolve) => dequeues.push(resolve)),
    beginFromPeer: () => new Promise<BeginResult>((resolve) => takes.push(resolve)),
    run: () => new Promise<void>((resolve) => runs.push(resolve)),
  };
  const registry = { get: () => actor } as unknown as ActorRegistry;
  const identity = new NodeIdentity(options);
  const slots = new ActorSlots(
    registry,
    runner as unknown as EpisodeRunner,
    {} as EpisodeStore,
    {} as EpisodeQueue,
    {} as WorkClaims,
    identity,
    {} as EventOutbox,
    new Mode(options, identity, registry),
  );
  return { slots, dequeues, takes, runs };
}

/** Lets pending promise callbacks run, a bounded number of event-loop turns at most. */
async function settles(condition: () => boolean): Promise<boolean> {
  for (let turn = 0; turn < 50 && !condition(); turn++) await new Promise((resolve) => setImmediate(resolve));
  return condition();
}

describe('ActorSlots queue', () => {
  it('looks again when a row was queued while a dequeue that came back empty was in flight', async () => {
    const { slots, dequeues } = slotsWithManualQueue();
    slots.noteQueued('a');
    expect(dequeues).toHaveLength(1);
    // A row is queued (and noted) while that dequeue runs; its snapshot predates the row's commit.
    slots.noteQueued('a');
    dequeues[0]?.({ status: 'duplicate' });

    expect(await settles(() => dequeues.length === 2)).toBe(true);
  });

  it('looks again by itself when the oldest queued row has a claim held elsewhere', async () => {
    jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask', 'Date', 'performance'] });
    try {
      const { slots, dequeues } = slotsWithManualQueue();
      slots.noteQueued('a');
      dequeues[0]?.({ status: 'busy' });
      // Nothing notes the queue when the other node lets the claim go: the slots must come back on their own.
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
  const started = (id: string): BeginResult => ({ status: 'started', episode: { id } as EpisodeRow, grant: {} as AcquireResult });

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

  it('looks once more when an offer came while a take that came back empty was in flight', async () => {
    const { slots, takes } = slotsWithManualQueue();
    slots.noteOffered('a');
    slots.noteOffered('a');
    takes[0]?.({ status: 'duplicate' });
    expect(await settles(() => takes.length === 2)).toBe(true);
  });

  it('takes nothing once the node drains', () => {
    const { slots, takes } = slotsWithManualQueue();
    slots.stopAccepting();
    slots.noteOffered('a');
    expect(takes).toHaveLength(0);
  });
});
