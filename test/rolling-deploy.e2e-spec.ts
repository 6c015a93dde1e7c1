import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { rebalanceOn, startNode, stepsJournaled } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const EPISODES = 300;

describe('rolling deploy of 3 nodes while 300 episodes flow', () => {
  const database = useDatabase();
  const live: DemoNode[] = [];
  const retired: DemoNode[] = [];

  beforeAll(async () => {
    live.push(
      ...(await Promise.all(
        ['node-1', 'node-2', 'node-3'].map((id) => startNode(database.url, id)),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all([...live, ...retired].map((node) => node.stop('SIGKILL')));
  });

  const interrupted: string[] = [];
  const scalar = async (sql: string) => (await database.db.query(sql)).rows[0].n as number;

  /** Publishes event i through some live node; retried elsewhere with the same event id, so never twice. */
  async function publish(i: number): Promise<void> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const node = live[(i + attempt) % live.length];
      try {
        const response = await fetch(`http://127.0.0.1:${node.port}/events`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            type: 'resource.rebalance',
            eventId: `roll-${i}`,
            payload: { resource: `roll-${i}`, stepMs: 40, outputKey: `roll-${i}` },
          }),
        });
        if (response.status === 202) return;
      } catch {
        // that node is going down: try the next one
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`could not publish event ${i}`);
  }

  it('ends every episode done exactly once, within maxAttempts, with nothing left running or queued', async () => {
    const publishing = (async () => {
      for (let i = 0; i < EPISODES; i++) {
        await publish(i);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    const deploying = (async () => {
      for (let n = 1; n <= 3; n++) {
        await waitFor(
          'episodes flowing',
          async () => (await scalar(`SELECT count(*)::int AS n FROM cyclium_episodes`)) >= n * 40,
        );
        const old = live.shift() as DemoNode;
        retired.push(old);
        // Make sure the deploy interrupts work: this node is mid-episode when its SIGTERM comes.
        const inFlight = await rebalanceOn(old, {
          resource: `in-flight-${n}`,
          stepMs: 500,
          outputKey: `in-flight-${n}`,
        });
        interrupted.push(inFlight);
        await waitFor(
          'the in-flight episode to pass a step',
          async () => (await stepsJournaled(database.db, inFlight)).length >= 1,
        );
        await old.stop('SIGTERM');
        live.push(await startNode(database.url, `node-${n}-v2`));
      }
    })();
    await Promise.all([publishing, deploying]);

    await waitFor(
      'the cluster to settle',
      async () =>
        (await scalar(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status IN ('running', 'queued')`,
        )) === 0 &&
        (await scalar(`SELECT count(*)::int AS n FROM cyclium_episodes`)) >= EPISODES + 3,
      90_000,
      250,
    );
    const flowing = `FROM cyclium_episodes WHERE trigger_ref->'payload'->>'resource' LIKE 'roll-%'`;
    expect(await scalar(`SELECT count(*)::int AS n ${flowing}`)).toBe(EPISODES);
    expect(await scalar(`SELECT count(*)::int AS n ${flowing} AND status = 'done'`)).toBe(EPISODES);
    expect(
      await scalar(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE attempts > max_attempts`),
    ).toBe(0);
    expect(
      await scalar(
        `SELECT count(DISTINCT dedupe_key)::int AS n FROM cyclium_outputs WHERE dedupe_key LIKE 'roll-%'`,
      ),
    ).toBe(EPISODES);
    expect(
      await scalar(`SELECT count(*)::int AS n FROM cyclium_outputs WHERE dedupe_key LIKE 'roll-%'`),
    ).toBe(EPISODES);
    // The deploy did interrupt work: each retired node's in-flight episode was restarted elsewhere
    // and finished. A restart may land on the node retired next and be interrupted again, so the
    // count of attempts is only bounded (checked above for every episode), not fixed.
    const { rows } = await database.db.query(
      `SELECT status, attempts FROM cyclium_episodes WHERE id = ANY($1)`,
      [interrupted],
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.status).toBe('done');
      expect(row.attempts).toBeGreaterThanOrEqual(1);
    }
  }, 240_000);
});
