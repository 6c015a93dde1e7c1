import { afterEach, describe, expect, it, jest } from '@jest/globals';
import type { Bus } from '../bus/bus.interface.js';
import { LocalBus } from '../bus/local-bus.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Peers } from '../identity/peers.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { BACKUP_STEP_MS, TriggerPlacement } from './trigger-placement.service.js';

function node(name: string, bus: Bus, names: string[]): { peers: Peers; placement: TriggerPlacement } {
  const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: name })));
  peers.update(names.map((identity) => ({ identity, actors: null })));
  const placement = new TriggerPlacement(bus, peers);
  placement.start();
  return { peers, placement };
}

/** A key for which `first` ranks 0 among the two nodes. */
function keyFirstOn(first: Peers): string {
  for (let i = 0; ; i++) if (first.rankOf(`key-${i}`, 'actor') === 0) return `key-${i}`;
}

describe('TriggerPlacement', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it('dispatches at once on the first node, and a backup stands down on its signal', async () => {
    const bus = new LocalBus();
    const a = node('a', bus, ['a', 'b']);
    const b = node('b', bus, ['a', 'b']);
    const key = keyFirstOn(a.peers);
    await expect(a.placement.turn(key, 'actor')).resolves.toBe('first');
    const started = performance.now();
    const backup = b.placement.turn(key, 'actor');
    a.placement.dispatched(key, { status: 'duplicate' });
    await expect(backup).resolves.toBe('handled');
    expect(performance.now() - started).toBeLessThan(BACKUP_STEP_MS / 2);
    // A trigger that fires here only later (a debounce ending later) finds the signal remembered.
    await expect(b.placement.turn(key, 'actor')).resolves.toBe('handled');
  });

  it('takes over after its rank delay when the first node signals nothing (it drained, dropped or is disabled)', async () => {
    jest.useFakeTimers({ doNotFake: ['setImmediate', 'performance'] });
    const bus = new LocalBus();
    const a = node('a', bus, ['a', 'b']);
    const b = node('b', bus, ['a', 'b']);
    const key = keyFirstOn(a.peers);
    const backup = b.placement.turn(key, 'actor');
    a.placement.dispatched(key, { status: 'busy' });
    a.placement.dispatched(key, { status: 'dropped' });
    a.placement.dispatched(key, { status: 'disabled' });
    await jest.advanceTimersByTimeAsync(BACKUP_STEP_MS - 1);
    let settled = false;
    void backup.then(() => (settled = true));
    await Promise.resolve();
    expect(settled).toBe(false);
    await jest.advanceTimersByTimeAsync(1);
    await expect(backup).resolves.toBe('backup');
  });

  it('races as before on a bus without dispatch signals', async () => {
    const plain = { publish: jest.fn(), subscribe: jest.fn() } as unknown as Bus;
    const a = node('a', plain, ['a', 'b']);
    await expect(a.placement.turn('k', 'actor')).resolves.toBe('race');
  });

  it('hands over what it stands by for when the node stops, rather than forgetting it', async () => {
    const bus = new LocalBus();
    const a = node('a', bus, ['a', 'b']);
    const b = node('b', bus, ['a', 'b']);
    const key = keyFirstOn(a.peers);
    const backup = b.placement.turn(key, 'actor');
    b.placement.stop();
    await expect(backup).resolves.toBe('handover');
    expect(b.placement.waitingBackups).toBe(0);
    await expect(b.placement.turn(key, 'actor')).resolves.toBe('handover');
  });
});
