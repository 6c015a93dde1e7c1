import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

const EVENTS = 500;

describe('3 demo node processes, 500 events over PostgresBus', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(
        [1, 2, 3].map((i) =>
          startDemoNode(database.url, {
            CYCLIUM_NODE_ID: `node-${i}`,
            DEMO_JITTER_MS: '50',
            DEMO_DB_POOL: '8',
          }),
        ),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGTERM')));
  });

  const scalar = async (sql: string) => (await database.db.query(sql)).rows[0].n as number;

  it('makes exactly 500 episodes, all done, none run on two nodes', async () => {
    const post = async (i: number) => {
      const response = await fetch(`http://127.0.0.1:${nodes[i % 3].port}/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          type: 'resource.updated',
          payload: { resource: `r-${i}`, usage: i % 100 },
        }),
      });
      expect(response.status).toBe(202);
    };
    for (let i = 0; i < EVENTS; i += 25)
      await Promise.all(Array.from({ length: 25 }, (_, j) => post(i + j)));

    await waitFor(
      `${EVENTS} episodes done`,
      async () => {
        const { rows } = await database.db.query(
          `SELECT status, phase, owner_node, count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor' GROUP BY 1, 2, 3 ORDER BY 4 DESC`,
        );
        const done = rows
          .filter((r: { status: string }) => r.status === 'done')
          .reduce((sum: number, r: { n: number }) => sum + r.n, 0);
        // Not there yet: what the rows are doing, for the timeout's message.
        if (done < EVENTS) throw new Error(`by status, phase and node: ${JSON.stringify(rows)}`);
        return true;
      },
      120_000,
      250,
    );
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor'`,
      ),
    ).toBe(EVENTS);
    expect(
      await scalar(
        `SELECT count(DISTINCT trigger_ref->>'eventId')::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor'`,
      ),
    ).toBe(EVENTS);
    // Running requires the claim, and every claim was taken once (fence 1) by the episode's own node.
    expect(
      // The claim as the episode row holds it: alone, or mirroring a claim-table row.
      await scalar(`SELECT count(*)::int AS n FROM cyclium_episodes e
                     WHERE e.actor_id = 'resource_monitor' AND e.claim_fence = 1
                       AND e.claim_state = 'done' AND e.claim_owner = e.owner_node`),
    ).toBe(EVENTS);
    expect(
      await scalar(`SELECT count(*)::int AS n FROM cyclium_episode_steps s JOIN cyclium_episodes e ON e.id = s.episode_id
                     WHERE e.actor_id = 'resource_monitor'`),
    ).toBe(EVENTS);
    const owners = (
      await database.db.query(
        `SELECT DISTINCT owner_node FROM cyclium_episodes WHERE actor_id = 'resource_monitor'`,
      )
    ).rows;
    expect(owners.length).toBeGreaterThanOrEqual(2);
    // resource_monitor's findings: one active breach per resource over the default 90% limit.
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM cyclium_findings WHERE status = 'active' AND class = 'limit_breach'`,
      ),
    ).toBe(Array.from({ length: EVENTS }, (_, i) => i % 100).filter((usage) => usage > 90).length);
  }, 180_000);

  it('answers 400, and stores nothing, for an event the bus refuses', async () => {
    const post = (body: unknown) =>
      fetch(`http://127.0.0.1:${nodes[0]?.port}/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const body of [
      { type: 'episode.completed', payload: { episodeId: 'forged' } },
      { type: 'cyclium.episode.cancel', payload: { episodeId: 'forged' } },
      {
        type: 'resource.updated',
        eventId: 'nul-payload',
        payload: { resource: 'a\u0000b', usage: 1 },
      },
      { type: '*', payload: {} },
    ]) {
      const response = await post(body);
      expect({ body, status: response.status }).toEqual({ body, status: 400 });
      expect(((await response.json()) as { message: string }).message).toMatch(
        /reserved for the library|NUL character|concrete, non-empty type/,
      );
    }
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM cyclium_events WHERE payload->>'episodeId' = 'forged' OR event_id = 'nul-payload'`,
      ),
    ).toBe(0);
  });
});
