import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { rebalanceOn, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

/**
 * Three demo nodes under a steady stream of events over HTTP, all stopped at once (SIGTERM while
 * the client keeps publishing, then kill -9 twice in a row) and replaced by nodes with new
 * identities: every event answered 202, including those a draining node answered, has exactly one
 * resource_monitor episode.
 */
describe('whole-cluster stops', () => {
  const database = useDatabase(4);
  const all: DemoNode[] = [];
  let live: DemoNode[] = [];
  const accepted = new Set<string>();
  let generation = 0;
  let sent = 0;

  afterAll(async () => {
    await Promise.all(all.map((node) => node.stop('SIGKILL')));
  });

  async function bootCluster(): Promise<void> {
    generation++;
    live = await Promise.all(
      [1, 2, 3].map((i) => startNode(database.url, `gen${generation}-node-${i}`)),
    );
    all.push(...live);
  }

  /** Publishes round-robin until `until` resolves; an event counts once a node answered 202. */
  async function stream(until: Promise<unknown>): Promise<void> {
    let done = false;
    void until.then(() => (done = true));
    const targets = live;
    while (!done) {
      const node = targets[sent % targets.length] as DemoNode;
      const eventId = `stop-${sent++}`;
      try {
        const response = await fetch(`http://127.0.0.1:${node.port}/events`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            type: 'resource.updated',
            eventId,
            payload: { resource: eventId, usage: 10 },
          }),
        });
        if (response.status === 202) accepted.add(eventId);
        await response.arrayBuffer();
      } catch {
        // refused: that node is gone
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  async function episodesPerEvent(): Promise<Map<string, number>> {
    const { rows } = await database.db.query<{ event_id: string; n: number }>(
      `SELECT trigger_ref->>'eventId' AS event_id, count(*)::int AS n FROM cyclium_episodes
        WHERE actor_id = 'resource_monitor' AND expectation_id = 'check_resource_limits' GROUP BY 1`,
    );
    return new Map(rows.map((r) => [r.event_id, r.n]));
  }

  async function everyAcceptedOnce(): Promise<void> {
    await waitFor(
      `an episode for each of ${accepted.size} accepted events`,
      async () => {
        const seen = await episodesPerEvent();
        return [...accepted].every((id) => seen.has(id));
      },
      45_000,
      250,
    );
    const seen = await episodesPerEvent();
    const doubled = [...seen].filter(([, n]) => n !== 1);
    expect(doubled).toEqual([]);
  }

  /**
   * Streams for a while, then stops every node at once with `signal` while the stream goes on;
   * returns how many events were accepted after the signal (by draining nodes). Each node runs an
   * episode that ignores its abort, so a drain takes its whole episodeShutdownMs.
   */
  async function stopAllUnderLoad(signal: NodeJS.Signals): Promise<number> {
    const before = accepted.size;
    let stopped!: () => void;
    const streaming = stream(new Promise<void>((resolve) => (stopped = resolve)));
    await waitFor('events flowing', () => accepted.size >= before + 150, 20_000);
    await Promise.all(
      live.map((node, i) =>
        rebalanceOn(node, {
          resource: `slow-${generation}-${i}`,
          stepMs: 5_000,
          ignoreAbortAtStep: 1,
        }),
      ),
    );
    const signaled = accepted.size;
    await Promise.all(live.map((node) => node.stop(signal)));
    stopped();
    await streaming;
    return accepted.size - signaled;
  }

  it('loses no accepted event when all three get SIGTERM at once, then kill -9 twice in a row', async () => {
    await bootCluster();
    const answeredWhileDraining = await stopAllUnderLoad('SIGTERM');
    expect(answeredWhileDraining).toBeGreaterThan(20);
    await bootCluster();
    await everyAcceptedOnce();

    await stopAllUnderLoad('SIGKILL');
    await bootCluster();
    await stopAllUnderLoad('SIGKILL');
    await bootCluster();
    await everyAcceptedOnce();
  }, 240_000);
});
