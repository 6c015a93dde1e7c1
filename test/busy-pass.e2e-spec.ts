/**
 * A node with no free slot does not keep a bus-triggered episode to itself while a peer hosting
 * the actor has one: it holds the trigger in memory, its event unsettled (ActorSlots' waiting
 * triggers), and passes it down the ranks to the first node with a free slot, which starts it at
 * once (TriggerPlacement). A next rank that is frozen costs nothing: the full node starts the
 * trigger itself as soon as it frees.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { NodeIdentity } from '@cyclium/nestjs';
import { eventKey } from '../libs/cyclium/src/triggers/dedupe-keys.js';
import { Peers } from '../libs/cyclium/src/cluster/peers.service.js';
import { resolveCycliumOptions } from '../libs/cyclium/src/options/resolve-options.js';
import { FAST_RECOVERY, post, rebalanceOn, startNode } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ACTOR = 'resource_rebalancer';
const NAMES = ['busy-a', 'busy-b'];

/** Which node ranks first for the `resource.rebalance` event `eventId` with `payload`, as every node computes it. */
function firstFor(eventId: string, payload: unknown): string {
  const key = eventKey(ACTOR, 'rebalance', 'resource.rebalance', eventId, payload);
  return NAMES.find((name) => {
    const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: name })));
    peers.update(NAMES.map((identity) => ({ identity, actors: [ACTOR] })));
    return peers.rankOf(key, ACTOR) === 0;
  }) as string;
}

describe('busy nodes pass work on', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];
  const scalar = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows[0].n as number;

  beforeAll(async () => {
    // One slot each; the first recovery sweep well after the test, so only placement moves rows.
    const env = { ...FAST_RECOVERY, DEMO_REBALANCER_SLOTS: '1', DEMO_SETTLE_MS: '60000' };
    for (const name of NAMES) nodes.push(await startNode(database.url, name, env));
    await waitFor(
      'both nodes to have beaten after the last one registered',
      async () =>
        (await scalar(
          `SELECT count(*)::int AS n FROM cyclium_nodes WHERE node_identity = ANY($1)
            AND last_seen_at > (SELECT max(started_at) + interval '1 second' FROM cyclium_nodes WHERE node_identity = ANY($1))`,
          [NAMES],
        )) === 2,
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  /** `count` events each node in `order` ranks first for, round robin, posted to `to`. */
  async function publish(
    count: number,
    order: string[],
    to: (n: number) => DemoNode,
    tag: string,
  ): Promise<string[]> {
    const events: Array<{ eventId: string; payload: { resource: string; stepMs: number } }> = [];
    for (let i = 0; events.length < count; i++) {
      const payload = { resource: `${tag}-${i}`, stepMs: 20 };
      if (firstFor(`${tag}-${i}`, payload) === order[events.length % order.length])
        events.push({ eventId: `${tag}-${i}`, payload });
    }
    for (const [n, event] of events.entries()) {
      await post(to(n), '/events', {
        type: 'resource.rebalance',
        eventId: event.eventId,
        payload: event.payload,
      });
    }
    return events.map((e) => e.eventId);
  }

  const doneFor = (ids: string[]) =>
    scalar(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status = 'done' AND trigger_ref->>'eventId' = ANY($1)`,
      [ids],
    );
  const queuedFor = (ids: string[]) =>
    scalar(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE queued_at IS NOT NULL AND trigger_ref->>'eventId' = ANY($1)`,
      [ids],
    );
  const ownersOf = async (ids: string[]) =>
    (
      await database.db.query(
        `SELECT owner_node FROM cyclium_episodes WHERE trigger_ref->>'eventId' = ANY($1)`,
        [ids],
      )
    ).rows.map((r) => r.owner_node as string);

  it('runs all 10 events on B while A is busy with a long episode', async () => {
    const [a] = nodes;
    const long = await rebalanceOn(a, { resource: 'long', stepMs: 60_000 });
    // Half of them A ranks first (without a free slot, it would keep them), half B.
    const ids = await publish(10, NAMES, (n) => nodes[n % 2], 'busy');
    await waitFor(
      'the 10 episodes to be done',
      async () => (await doneFor(ids)) === 10,
      20_000,
      100,
    );
    expect(await ownersOf(ids)).toEqual(Array<string>(10).fill(NAMES[1]));
    // The five A ranked first were passed on from A's memory, not queued in the table.
    expect(await queuedFor(ids)).toBe(0);
    const longRow = (
      await database.db.query(`SELECT status, owner_node FROM cyclium_episodes WHERE id = $1`, [
        long,
      ])
    ).rows[0];
    expect(longRow).toEqual({ status: 'running', owner_node: NAMES[0] });
  }, 40_000);

  it('keeps what a full node passed to a next rank that is frozen: the full node runs it once it frees', async () => {
    const [a, b] = nodes;
    // A (still busy, and now frozen) is the next rank for everything B ranks first.
    a.process.kill('SIGSTOP');
    try {
      await rebalanceOn(b, { resource: 'long-b', stepMs: 500 });
      const ids = await publish(4, [NAMES[1]], () => b, 'frozen');
      await waitFor(
        'the 4 episodes to be done',
        async () => (await doneFor(ids)) === 4,
        20_000,
        100,
      );
      expect(await ownersOf(ids)).toEqual(Array<string>(4).fill(NAMES[1]));
      // They waited in B's memory for its slot, not as queued rows.
      expect(await queuedFor(ids)).toBe(0);
    } finally {
      a.process.kill('SIGCONT');
    }
  }, 40_000);
});
