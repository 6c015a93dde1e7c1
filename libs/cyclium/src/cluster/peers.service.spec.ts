import { describe, expect, it } from '@jest/globals';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { MAX_COUNTED_NODES, MAX_RANK, Peers } from './peers.service.js';
import { notifySpacingMs } from '../bus/notify-spacing.js';

const NODES = ['node-1', 'node-2', 'node-3', 'node-4', 'node-5'];

function cluster(names: string[]): Peers[] {
  return names.map((name) => {
    const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: name })));
    peers.update(names.map((identity) => ({ identity, actors: null })));
    return peers;
  });
}

describe('Peers', () => {
  it(
    'counts the hosts of an actor, itself included, as the ranks run: the last rank is hosts - ' +
      '1',
    () => {
      const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: 'node-1' })));
      peers.update([
        { identity: 'node-1', actors: ['x'] },
        { identity: 'node-2', actors: ['x', 'y'] },
        { identity: 'node-3', actors: ['y'] },
        { identity: 'node-4', actors: null },
      ]);
      expect(peers.hostsOf('x')).toBe(3);
      const ranks = new Set(Array.from({ length: 200 }, (_, i) => peers.rankOf(`k${i}`, 'x')));
      expect(Math.max(...ranks)).toBe(peers.hostsOf('x') - 1);
    },
  );

  it(
    'ranks the nodes alike on every node: each key has one first node, and the ranks are ' +
      '0..MAX_RANK',
    () => {
      const nodes = cluster(NODES);
      const firsts = new Map<number, number>();
      for (let i = 0; i < 2_000; i++) {
        const key = `event:monitor:check:${i}`;
        const ranks = nodes.map((peers) => peers.rankOf(key, 'monitor'));
        // Five nodes: the last two share the last rank (MAX_RANK = 3).
        expect([...ranks].sort()).toEqual([0, 1, 2, 3, 3]);
        const first = ranks.indexOf(0);
        firsts.set(first, (firsts.get(first) ?? 0) + 1);
      }
      // Spread evenly enough that no node takes most of the work (expected 400 each).
      for (const index of NODES.keys()) expect(firsts.get(index) ?? 0).toBeGreaterThan(300);
    },
  );

  it('moves only the keys of a node that leaves to the others', () => {
    const before = cluster(NODES);
    const after = cluster(NODES.slice(0, 4));
    for (let i = 0; i < 500; i++) {
      const key = `k${i}`;
      const firstBefore = before.findIndex((p) => p.rankOf(key, 'monitor') === 0);
      const firstAfter = after.findIndex((p) => p.rankOf(key, 'monitor') === 0);
      if (firstBefore !== 4) expect(firstAfter).toBe(firstBefore);
    }
  });

  it(
    'ranks only the nodes that host the actor (a node that does not say counts as hosting ' +
      'all)',
    () => {
      const [api] = cluster(['api']);
      api.update([
        { identity: 'api', actors: [] },
        { identity: 'worker-1', actors: ['monitor'] },
        { identity: 'worker-2', actors: null },
      ]);
      const worker = new Peers(
        new NodeIdentity(resolveCycliumOptions({ nodeIdentity: 'worker-1' })),
      );
      worker.update([
        { identity: 'api', actors: [] },
        { identity: 'worker-2', actors: null },
      ]);
      for (let i = 0; i < 200; i++) {
        // worker-1 competes with worker-2 only: the api node never stands in front of it.
        expect(worker.rankOf(`k${i}`, 'monitor')).toBeLessThan(2);
      }
      expect([...Array(200).keys()].some((i) => worker.rankOf(`k${i}`, 'monitor') === 0)).toBe(
        true,
      );
    },
  );

  it(
    'a hundred rows in the node table stretch no wait past the bounds: size, spacing and rank ' +
      'stay capped',
    () => {
      const [real] = cluster(['real']);
      real.update([
        { identity: 'real', actors: null },
        ...Array.from({ length: 100 }, (_, i) => ({ identity: `forged-${i}`, actors: null })),
      ]);
      expect(real.size).toBe(MAX_COUNTED_NODES);
      expect(notifySpacingMs(real.size)).toBe(2_250);
      expect(real.hostsOf('monitor')).toBe(MAX_RANK + 1);
      const ranks = Array.from({ length: 200 }, (_, i) => real.rankOf(`k${i}`, 'monitor'));
      expect(Math.max(...ranks)).toBe(MAX_RANK);
    },
  );

  it('always counts itself, and alone ranks first for everything', () => {
    const [alone] = cluster(['solo']);
    alone.update([]);
    expect(alone.list()).toEqual(['solo']);
    expect(alone.size).toBe(1);
    expect(alone.rankOf('anything', 'monitor')).toBe(0);
  });

  describe('as the bus audience', () => {
    const solo = (beatMs = 15_000) =>
      new Peers(
        new NodeIdentity(resolveCycliumOptions({ nodeIdentity: 'solo' })),
        resolveCycliumOptions({ nodeBeatIntervalMs: beatMs }),
      );

    it('is never alone before its first look at the node table', () => {
      expect(solo().alone).toBe(false);
    });

    it('is alone when no other node listens, whatever the peers that take triggers', () => {
      const peers = solo();
      peers.update([{ identity: 'solo', actors: null }], ['solo']);
      expect(peers.alone).toBe(true);
      // A disabled node takes no triggers but still listens.
      peers.update([{ identity: 'solo', actors: null }], ['solo', 'disabled-one']);
      expect(peers.alone).toBe(false);
    });

    it(
      'is not alone from the moment a node announces itself until the node table shows it, then ' +
        'as the table says',
      () => {
        const peers = solo();
        peers.update([], ['solo']);
        peers.joined('solo');
        expect(peers.alone).toBe(true);
        peers.joined('newcomer');
        expect(peers.alone).toBe(false);
        // A look taken before the newcomer registered does not forget it.
        peers.update([], ['solo']);
        expect(peers.alone).toBe(false);
        peers.update([], ['solo', 'newcomer']);
        expect(peers.alone).toBe(false);
        // Once the table showed it, the table decides: the newcomer left.
        peers.update([], ['solo']);
        expect(peers.alone).toBe(true);
      },
    );

    it('forgets an announced node that never registers after three beat intervals', async () => {
      const peers = solo(10);
      peers.update([], ['solo']);
      peers.joined('ghost');
      expect(peers.alone).toBe(false);
      await new Promise((resolve) => setTimeout(resolve, 40));
      expect(peers.alone).toBe(true);
    });
  });
});
