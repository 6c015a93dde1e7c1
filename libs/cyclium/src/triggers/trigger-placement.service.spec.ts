import { afterEach, describe, expect, it, jest } from '@jest/globals';
import type { Bus } from '../bus/bus.interface.js';
import { LocalBus } from '../bus/local-bus.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Peers } from '../cluster/peers.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { Dispatcher } from '../dispatch/dispatcher.service.js';
import { BACKUP_STEP_MS, TriggerPlacement } from './trigger-placement.service.js';

interface TestNode {
  peers: Peers;
  placement: TriggerPlacement;
  /** The actors this node was offered a queued row of, in order. */
  offered: string[];
}

function node(name: string, bus: Bus, names: string[], freeSlot = false): TestNode {
  const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: name })));
  peers.update(names.map((identity) => ({ identity, actors: null })));
  const offered: string[] = [];
  const dispatcher = {
    offered: (actorId: string) => offered.push(actorId),
    canStartNow: () => freeSlot,
  } as unknown as Dispatcher;
  const placement = new TriggerPlacement(bus, peers, dispatcher);
  placement.start();
  return { peers, placement, offered };
}

/** A key for which the nodes rank in the order given. */
function keyRanked(...order: Peers[]): string {
  for (let i = 0; ; i++)
    if (order.every((peers, rank) => peers.rankOf(`key-${i}`, 'actor') === rank)) return `key-${i}`;
}

const queuedRow = { status: 'queued', episode: { actorId: 'actor' } as EpisodeRow } as const;

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

  it(
    'takes over after its rank delay when the first node signals nothing (it drained, dropped ' +
      'or is disabled)',
    async () => {
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
    },
  );

  it('races as before on a bus without dispatch signals', async () => {
    const plain = { publish: jest.fn(), subscribe: jest.fn() } as unknown as Bus;
    const a = node('a', plain, ['a', 'b']);
    await expect(a.placement.turn('k', 'actor')).resolves.toBe('race');
  });

  it(
    'hands over what it stands by for when the node stops, rather than forgetting ' + 'it',
    async () => {
      const bus = new LocalBus();
      const a = node('a', bus, ['a', 'b']);
      const b = node('b', bus, ['a', 'b']);
      const key = keyFirstOn(a.peers);
      const backup = b.placement.turn(key, 'actor');
      b.placement.stop();
      await expect(backup).resolves.toBe('handover');
      expect(b.placement.waitingBackups).toBe(0);
      await expect(b.placement.turn(key, 'actor')).resolves.toBe('handover');
    },
  );

  describe('a first node with no free slot', () => {
    it(
      'offers the row it queued to the next rank only, which stands down at once and notes the ' +
        'offer',
      async () => {
        const bus = new LocalBus();
        const names = ['a', 'b', 'c'];
        const [a, b, c] = names.map((name) => node(name, bus, names));
        const key = keyRanked(a.peers, b.peers, c.peers);
        const started = performance.now();
        const turns = [b.placement.turn(key, 'actor'), c.placement.turn(key, 'actor')];
        a.placement.dispatched(key, queuedRow);
        await expect(Promise.all(turns)).resolves.toEqual(['handled', 'handled']);
        expect(performance.now() - started).toBeLessThan(BACKUP_STEP_MS / 2);
        expect(b.offered).toEqual(['actor']);
        expect(c.offered).toEqual([]);
        expect(a.offered).toEqual([]);
      },
    );

    it(
      'still offers the row to a next rank that hears the event only after the ' + 'offer',
      async () => {
        const bus = new LocalBus();
        const a = node('a', bus, ['a', 'b']);
        const b = node('b', bus, ['a', 'b']);
        const key = keyRanked(a.peers, b.peers);
        a.placement.dispatched(key, queuedRow);
        await expect(b.placement.turn(key, 'actor')).resolves.toBe('handled');
        expect(b.offered).toEqual(['actor']);
        // Once: the offer is used up.
        await expect(b.placement.turn(key, 'actor')).resolves.toBe('handled');
        expect(b.offered).toEqual(['actor']);
      },
    );

    it(
      'offers nothing when it runs the episode, nor from the last rank (nobody is ' + 'next)',
      async () => {
        const bus = new LocalBus();
        const send = jest.spyOn(bus, 'signalDispatched');
        const a = node('a', bus, ['a', 'b']);
        const b = node('b', bus, ['a', 'b']);
        const key = keyRanked(a.peers, b.peers);
        const backup = b.placement.turn(key, 'actor');
        a.placement.dispatched(key, {
          status: 'started',
          episode: { actorId: 'actor' } as EpisodeRow,
        });
        await expect(backup).resolves.toBe('handled');
        // b is last for this one: it keeps what it queued, and tells nobody to take it.
        b.placement.dispatched(key, queuedRow);
        expect(send.mock.calls.map(([tokens]) => tokens.length)).toEqual([1, 1]);
        expect([...a.offered, ...b.offered]).toEqual([]);
      },
    );

    it('sends its offer with the settled signal, in one NOTIFY run', () => {
      const bus = new LocalBus();
      const send = jest.spyOn(bus, 'signalDispatched');
      const a = node('a', bus, ['a', 'b']);
      node('b', bus, ['a', 'b']);
      const key = keyRanked(a.peers);
      a.placement.dispatched(key, queuedRow);
      expect(send).toHaveBeenCalledTimes(1);
      expect(send.mock.calls[0]?.[0]).toHaveLength(2);
    });
  });

  describe('a node holding a bus event in memory for want of a slot', () => {
    it(
      'passes it down the ranks to the first node with a free slot, which dispatches at ' + 'once',
      async () => {
        const bus = new LocalBus();
        const names = ['a', 'b', 'c'];
        const a = node('a', bus, names);
        const b = node('b', bus, names);
        const c = node('c', bus, names, true);
        const key = keyRanked(a.peers, b.peers, c.peers);
        const started = performance.now();
        const turns = [b.placement.turn(key, 'actor'), c.placement.turn(key, 'actor')];
        a.placement.waitingHere(key, 'actor', () => undefined);
        // b is full too: it passes the event on and keeps standing by; c has a slot and takes it
        // now.
        await expect(turns[1]).resolves.toBe('backup');
        expect(performance.now() - started).toBeLessThan(BACKUP_STEP_MS / 2);
        expect(b.placement.waitingBackups).toBe(1);
        c.placement.dispatched(key, {
          status: 'started',
          episode: { actorId: 'actor' } as EpisodeRow,
        });
        await expect(turns[0]).resolves.toBe('handled');
      },
    );

    it(
      'stops waiting once another node signals it settled, and not for its own ' + 'signal',
      async () => {
        const bus = new LocalBus();
        const a = node('a', bus, ['a', 'b']);
        const b = node('b', bus, ['a', 'b'], true);
        const [passed, settledHere] = [keyRanked(a.peers, b.peers), 'other-key'];
        const withdrawn: string[] = [];
        a.placement.waitingHere(passed, 'actor', () => withdrawn.push(passed));
        a.placement.waitingHere(settledHere, 'actor', () => withdrawn.push(settledHere));
        a.placement.dispatched(settledHere, {
          status: 'started',
          episode: { actorId: 'actor' } as EpisodeRow,
        });
        b.placement.dispatched(passed, {
          status: 'started',
          episode: { actorId: 'actor' } as EpisodeRow,
        });
        await new Promise((resolve) => setImmediate(resolve));
        expect(withdrawn).toEqual([passed]);
      },
    );
  });
});
