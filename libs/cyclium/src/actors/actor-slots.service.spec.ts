import { describe, expect, it, jest } from '@jest/globals';
import type { EpisodeRunner, BeginResult } from '../episodes/episode-runner.service.js';
import type { EpisodeQueue } from '../episodes/episode-queue.js';
import type { EpisodeStore } from '../episodes/episode-store.js';
import type { EventOutbox } from '../bus/event-outbox.service.js';
import type { WorkClaims } from '../claims/work-claims.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { ActorRegistry } from './actor-registry.service.js';
import type { RegisteredActor } from './registered-actor.js';
import { ActorSlots } from './actor-slots.service.js';

/** Slots for one actor with one slot, whose dequeues the test answers by hand. */
function slotsWithManualQueue() {
  const options = resolveCycliumOptions({ nodeIdentity: 'slots' });
  const actor = { id: 'a', options: { maxConcurrentEpisodes: 1 } } as unknown as RegisteredActor;
  const dequeues: Array<(result: BeginResult) => void> = [];
  const runner = { beginQueued: () => new Promise<BeginResult>((resolve) => dequeues.push(resolve)) };
  const slots = new ActorSlots(
    { get: () => actor } as unknown as ActorRegistry,
    runner as unknown as EpisodeRunner,
    {} as EpisodeStore,
    {} as EpisodeQueue,
    {} as WorkClaims,
    new NodeIdentity(options),
    {} as EventOutbox,
    options,
  );
  return { slots, dequeues };
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
