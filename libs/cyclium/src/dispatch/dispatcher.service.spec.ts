import { describe, expect, it, jest } from '@jest/globals';
import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { ActorSlots } from './actor-slots.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { DeferredRunner } from './deferred-runner.service.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import type { DispatchOptions } from './dispatch-result.js';
import { Dispatcher } from './dispatcher.service.js';
import { Mode } from './mode.service.js';

describe('Dispatcher.offered', () => {
  it('lets the slots take a queued row from a peer only where the actor runs', () => {
    const options = resolveCycliumOptions({ nodeIdentity: 'n' });
    const mode = new Mode(options, new NodeIdentity(options), {
      declares: () => true,
      get: () => ({ id: 'a' }),
    } as unknown as ActorRegistry);
    const noteOffered = jest.fn();
    const dispatcher = new Dispatcher(
      mode,
      { noteOffered } as unknown as ActorSlots,
      {} as DeferredRunner,
    );
    dispatcher.offered('a');
    expect(noteOffered).toHaveBeenCalledWith('a');
    for (const other of ['trigger_only', 'disabled'] as const) {
      mode.setActorOverride('a', other);
      dispatcher.offered('a');
    }
    expect(noteOffered).toHaveBeenCalledTimes(1);
  });
});

describe('Dispatcher.handOver', () => {
  const options = resolveCycliumOptions({ nodeIdentity: 'n' });
  const registry = { declares: () => true, get: () => ({ id: 'a' }) } as unknown as ActorRegistry;
  const mode = new Mode(options, new NodeIdentity(options), registry);
  const base: DispatchOptions = { dedupeKey: 'k', sourceStack: null, sourceEnv: null };
  const handedOver = (delayMs: number | undefined, dispatch: Partial<DispatchOptions> = {}) => {
    const defer = jest.fn(() => Promise.resolve({ status: 'duplicate' }));
    const dispatcher = new Dispatcher(
      mode,
      {} as ActorSlots,
      { defer } as unknown as DeferredRunner,
    );
    const expectation = {
      actorId: 'a',
      id: 'e',
      options: { delayMs },
    } as unknown as RegisteredExpectation;
    void dispatcher.handOver(
      expectation,
      { type: 'manual', payload: {} },
      { ...base, ...dispatch },
    );
    return (defer.mock.calls[0] as unknown as [unknown, unknown, DispatchOptions])[2].delay;
  };

  it(
    "keeps the expectation's delay, or the one the trigger asked for, and is otherwise due at " +
      'once',
    () => {
      expect(handedOver(5_000)).toEqual({ ms: 5_000 });
      const at = new Date('2030-01-01T00:00:00Z');
      expect(handedOver(5_000, { delay: { at } })).toEqual({ at });
      expect(handedOver(undefined)).toEqual({ ms: 0 });
      expect(handedOver(5_000, { delay: null })).toEqual({ ms: 0 });
    },
  );
});

describe('Dispatcher.dispatch of an actor paused cluster-wide', () => {
  const options = resolveCycliumOptions({ nodeIdentity: 'n' });
  const registry = { declares: () => true, get: () => ({ id: 'a' }) } as unknown as ActorRegistry;
  const expectation = { actorId: 'a', id: 'e', options: {} } as unknown as RegisteredExpectation;
  const base: DispatchOptions = { dedupeKey: 'k', sourceStack: null, sourceEnv: null };

  it('defers it due now (a request that never expires), and runs it once resumed', async () => {
    const mode = new Mode(options, new NodeIdentity(options), registry);
    const defer = jest.fn(() => Promise.resolve({ status: 'deferred' }));
    const dispatch = jest.fn(() => Promise.resolve({ status: 'started' }));
    const changed = jest.fn();
    mode.onActorChange(changed);
    const dispatcher = new Dispatcher(
      mode,
      { dispatch } as unknown as ActorSlots,
      { defer } as unknown as DeferredRunner,
    );
    mode.setPaused(['a']);
    expect(mode.of('a')).toBe('trigger_only');
    expect(mode.status().paused).toEqual(['a']);
    await dispatcher.dispatch(expectation, { type: 'manual', payload: {} }, base);
    expect(defer).toHaveBeenCalledTimes(1);
    expect(
      (defer.mock.calls[0] as unknown as [unknown, unknown, DispatchOptions])[2].delay,
    ).toEqual({ ms: 0 });
    // A disabled override stays disabled: a pause never turns an actor on.
    mode.setActorOverride('a', 'disabled');
    expect(mode.of('a')).toBe('disabled');
    mode.clearActorOverride('a');
    mode.setPaused([]);
    expect(mode.of('a')).toBe('full');
    expect(changed.mock.calls.map(([id]) => id)).toEqual(['a', 'a', 'a', 'a']);
    await dispatcher.dispatch(expectation, { type: 'manual', payload: {} }, base);
    expect(dispatch).toHaveBeenCalledTimes(1);
  });
});
