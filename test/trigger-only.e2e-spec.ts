import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, post, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const COUNT = 200;
const FULL = ['node-f1', 'node-f2'];
/** A slow poll: prompt dispatch can only come from the wake-up a deferring node sends. */
const TIMINGS = { ...FAST_RECOVERY, DEMO_TRIGGER_POLL_MS: '3000', DEMO_ADVISOR_EVERY: '2s' };

describe('trigger-only mode: one node triggers, two full nodes run', () => {
  const database = useDatabase();
  const nodes = new Map<string, DemoNode>();

  beforeAll(async () => {
    const started = await Promise.all([
      startNode(database.url, 'node-t', { ...TIMINGS, CYCLIUM_MODE: 'trigger_only' }),
      ...FULL.map((id) => startNode(database.url, id, TIMINGS)),
    ]);
    for (const [i, id] of ['node-t', ...FULL].entries()) nodes.set(id, started[i] as DemoNode);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([...nodes.values()].map((node) => node.stop('SIGKILL')));
  });

  const node = (id: string) => nodes.get(id) as DemoNode;
  const rows = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows;
  const count = async (sql: string, params: unknown[] = []) =>
    (await rows(sql, params))[0].n as number;
  const setMode = async (id: string, mode: string) => {
    const response = await fetch(`http://127.0.0.1:${node(id).port}/mode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ mode }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { nodeMode: string }).nodeMode).toBe(mode);
  };

  /** Every episode of `ids` done, by a full node, each of its five steps run once and on that node. */
  async function expectRunOnceOnFullNodes(ids: string[]): Promise<void> {
    await waitFor(
      `${ids.length} episodes done`,
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1) AND status = 'done'`,
          [ids],
        )) === ids.length,
      90_000,
      250,
    );
    const owners = await rows(
      `SELECT DISTINCT owner_node FROM cyclium_episodes WHERE id = ANY($1)`,
      [ids],
    );
    for (const { owner_node } of owners) expect(FULL).toContain(owner_node);
    const steps = await rows(
      `SELECT episode_id, count(*)::int AS n, count(DISTINCT step_no)::int AS distinct_steps, array_agg(DISTINCT node) AS nodes
         FROM demo_rebalance_log WHERE episode_id = ANY($1) GROUP BY episode_id`,
      [ids],
    );
    expect(steps).toHaveLength(ids.length);
    for (const step of steps) {
      expect({ episode: step.episode_id, n: step.n, distinct: step.distinct_steps }).toEqual({
        episode: step.episode_id,
        n: 5,
        distinct: 5,
      });
      expect(step.nodes).toHaveLength(1);
      expect(FULL).toContain(step.nodes[0]);
    }
  }

  it(`${COUNT} manual triggers on the trigger-only node: visible at once, each run once on a full node, every request completed`, async () => {
    const results = await Promise.all(
      Array.from({ length: COUNT }, (_, i) =>
        post<{ status: string; episodeId: string }>(
          node('node-t'),
          '/actors/resource_rebalancer/rebalance',
          {
            payload: { resource: `manual-${i}`, stepMs: 10 },
          },
        ),
      ),
    );
    expect(results.every((r) => r.status === 'deferred')).toBe(true);
    const ids = results.map((r) => r.episodeId);
    // Visible the moment the trigger returned: the row exists before any full node took it.
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1)`, [ids]),
    ).toBe(COUNT);
    await expectRunOnceOnFullNodes(ids);
    const requests = await rows(
      `SELECT status, source_node, claimed_by FROM cyclium_trigger_requests WHERE episode_id = ANY($1)`,
      [ids],
    );
    expect(requests).toHaveLength(COUNT);
    for (const request of requests) {
      expect(request).toMatchObject({ status: 'completed', source_node: 'node-t' });
      expect(FULL).toContain(request.claimed_by);
    }
  }, 120_000);

  it(`${COUNT} events published on the trigger-only node: each becomes one episode, run once on a full node`, async () => {
    await Promise.all(
      Array.from({ length: COUNT }, (_, i) =>
        post(node('node-t'), '/events', {
          type: 'resource.rebalance',
          eventId: `to-event-${i}`,
          payload: { resource: `event-${i}`, stepMs: 10 },
        }),
      ),
    );
    await waitFor(
      `${COUNT} episodes`,
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE trigger_ref->>'eventId' LIKE 'to-event-%'`,
        )) === COUNT,
      30_000,
    );
    const ids = (
      await rows(`SELECT id FROM cyclium_episodes WHERE trigger_ref->>'eventId' LIKE 'to-event-%'`)
    ).map((r) => r.id as string);
    await expectRunOnceOnFullNodes(ids);
    // Whichever node's insert won: a deferred one was run through its request, which is completed.
    const requests = await rows(
      `SELECT status FROM cyclium_trigger_requests WHERE episode_id = ANY($1)`,
      [ids],
    );
    expect(requests.every((r) => r.status === 'completed')).toBe(true);
  }, 120_000);

  it('a schedule that fires on all three nodes makes one episode per bucket, run on a full node', async () => {
    await waitFor(
      'three advisor buckets done',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_advisor' AND status = 'done'`,
        )) >= 3,
      30_000,
      250,
    );
    const perBucket = await rows(
      `SELECT dedupe_key, count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_advisor' GROUP BY 1`,
    );
    expect(perBucket.every((r) => r.n === 1)).toBe(true);
    const owners = await rows(
      `SELECT DISTINCT owner_node FROM cyclium_episodes WHERE actor_id = 'resource_advisor' AND status = 'done'`,
    );
    for (const { owner_node } of owners) expect(FULL).toContain(owner_node);
  }, 60_000);

  it('a full node switched to trigger-only runs nothing new; switched back, it drains what was deferred meanwhile', async () => {
    await setMode('node-f1', 'trigger_only');
    await setMode('node-f2', 'trigger_only');
    const deferred = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        post<{ status: string; episodeId: string }>(
          node('node-f1'),
          '/actors/resource_rebalancer/rebalance',
          {
            payload: { resource: `switched-${i}`, stepMs: 10 },
          },
        ),
      ),
    );
    expect(deferred.every((r) => r.status === 'deferred')).toBe(true);
    const ids = deferred.map((r) => r.episodeId);
    // No full node left: the requests wait (well past a poll interval and its wake-up).
    await waitFor(
      'two polls to have passed',
      async () => {
        const {
          rows: [row],
        } = await database.db.query(
          `SELECT now() - min(inserted_at) > interval '4 seconds' AS old FROM cyclium_trigger_requests WHERE episode_id = ANY($1)`,
          [ids],
        );
        return row.old;
      },
      20_000,
      250,
    );
    expect(
      await count(
        `SELECT count(*)::int AS n FROM cyclium_trigger_requests WHERE episode_id = ANY($1) AND status = 'pending'`,
        [ids],
      ),
    ).toBe(10);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1) AND status = 'deferred'`,
        [ids],
      ),
    ).toBe(10);

    await setMode('node-f1', 'full');
    await expectRunOnceOnFullNodes(ids);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1) AND owner_node = 'node-f1'`,
        [ids],
      ),
    ).toBe(10);
    await setMode('node-f2', 'full');
  }, 120_000);

  it('a full node killed with kill -9 right after taking requests: each still ends done exactly once, on the other full node', async () => {
    await setMode('node-f2', 'trigger_only'); // only f1 takes requests
    const taken = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        post<{ status: string; episodeId: string }>(
          node('node-t'),
          '/actors/resource_rebalancer/rebalance',
          {
            payload: { resource: `killed-${i}`, stepMs: 1_000 },
          },
        ),
      ),
    );
    const ids = taken.map((r) => r.episodeId);
    await waitFor(
      'node-f1 to have taken them all',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_trigger_requests WHERE episode_id = ANY($1) AND claimed_by = 'node-f1'`,
          [ids],
        )) === 8,
    );
    await node('node-f1').stop('SIGKILL');
    await setMode('node-f2', 'full');
    await waitFor(
      'the recovered episodes to finish on node-f2',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1) AND status = 'done' AND owner_node = 'node-f2'`,
          [ids],
        )) === 8,
      60_000,
      250,
    );
    expect(
      await count(
        `SELECT count(*)::int AS n FROM cyclium_trigger_requests WHERE episode_id = ANY($1) AND status <> 'completed'`,
        [ids],
      ),
    ).toBe(0);
    const repeated = await rows(
      `SELECT episode_id, step_no FROM demo_rebalance_log WHERE episode_id = ANY($1) GROUP BY 1, 2 HAVING count(*) > 1`,
      [ids],
    );
    expect(repeated).toEqual([]);
    expect(
      await count(
        `SELECT count(DISTINCT (episode_id, step_no))::int AS n FROM demo_rebalance_log WHERE episode_id = ANY($1)`,
        [ids],
      ),
    ).toBe(40);
  }, 90_000);
});
