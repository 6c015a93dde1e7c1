import { describe, expect, it, jest } from '@jest/globals';
import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { ActorSlots } from './actor-slots.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { DeferredRunner } from './deferred-runner.service.js';
import { Dispatcher } from './dispatcher.service.js';
import { Mode } from './mode.service.js';

describe('Dispatcher.offered', () => {
  it('lets the slots take a queued row from a peer only where the actor runs', () => {
    const options = resolveCycliumOptions({ nodeIdentity: 'n' });
    const mode = new Mode(options, new NodeIdentity(options), { declares: () => true, get: () => ({ id: 'a' }) } as unknown as ActorRegistry);
    const noteOffered = jest.fn();
    const dispatcher = new Dispatcher(mode, { noteOffered } as unknown as ActorSlots, {} as DeferredRunner);
    dispatcher.offered('a');
    expect(noteOffered).toHaveBeenCalledWith('a');
    for (const other of ['trigger_only', 'disabled'] as const) {
      mode.setActorOverride('a', other);
      dispatcher.offered('a');
    }
    expect(noteOffered).toHaveBeenCalledTimes(1);
  });
});
