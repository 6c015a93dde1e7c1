import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { startBusNode } from './support/bus-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import { startAll, type DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * The bus's dispatch positions (cyclium_bus_positions) with real node processes: events that
 * committed while no node hosting their actor was reading still become one episode each, and a
 * debounce that was pending when its node stopped still fires once.
 */
describe('durable dispatch positions', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  async function boot(
    id: string,
    actors: string,
    env: Record<string, string> = {},
  ): Promise<DemoNode> {
    const node = await startBusNode(database.url, id, actors, env);
    nodes.push(node);
    return node;
  }

  const publish = (node: DemoNode, type: string, eventId: string, payload: unknown) =>
    post(node, '/events', { type, eventId, payload });

  /** Episodes per event id for one actor (event ids starting with `prefix`: the tests share the database). */
  async function episodesByEvent(actor: string, prefix = ''): Promise<Map<string, number>> {
    const { rows } = await database.db.query<{ event_id: string; n: number }>(
      `SELECT trigger_ref->>'eventId' AS event_id, count(*)::int AS n FROM cyclium_episodes
        WHERE actor_id = $1 AND starts_with(trigger_ref->>'eventId', $2) GROUP BY 1`,
      [actor, prefix],
    );
    return new Map(rows.map((r) => [r.event_id, r.n]));
  }

  async function allOnce(
    actor: string,
    prefix: string,
    ids: readonly string[],
    timeoutMs = 20_000,
  ): Promise<void> {
    const seen = async () => episodesByEvent(actor, prefix);
    await waitFor(
      `one ${actor} episode for each of ${ids.length} events`,
      async () => (await seen()).size >= ids.length,
      timeoutMs,
    );
    const byEvent = await seen();
    expect([...byEvent.keys()].sort()).toEqual([...ids].sort());
    expect([...byEvent.values()].every((n) => n === 1)).toBe(true);
  }

  afterEach(async () => {
    await Promise.all(nodes.splice(0).map((node) => node.stop('SIGKILL')));
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('gives each event a publisher-only service stored while every worker was stopped one episode when a worker with a new identity boots', async () => {
    // The publisher hosts no actor: it boots beside the worker, and publishes once that is gone.
    const [first, publisher] = await startAll([boot('worker-a', 'x'), boot('publisher', '')]);
    await first.stop('SIGTERM');
    const ids = Array.from({ length: 20 }, (_, i) => `alone-${i}`);
    for (const id of ids) await publish(publisher, 'test.x', id, { n: 1 });
    expect((await episodesByEvent('bus_x')).size).toBe(0);

    await boot('worker-b', 'x');
    await allOnce('bus_x', 'alone-', ids);
  });

  it('runs X at once while the hosts of Y are stopped, and each Y once when a host of Y boots', async () => {
    const [publisher, , hostY] = await startAll([
      boot('publisher-2', ''),
      boot('host-x', 'x'),
      boot('host-y', 'y'),
    ]);
    await hostY.stop('SIGTERM');

    const xs = Array.from({ length: 10 }, (_, i) => `split-x-${i}`);
    const ys = Array.from({ length: 10 }, (_, i) => `split-y-${i}`);
    for (let i = 0; i < 10; i++) {
      await publish(publisher, 'test.x', xs[i] as string, { n: i });
      await publish(publisher, 'test.y', ys[i] as string, { n: i });
    }
    await allOnce('bus_x', 'split-', xs);
    expect((await episodesByEvent('bus_y')).size).toBe(0);

    await boot('host-y-2', 'y');
    await allOnce('bus_y', 'split-', ys);
    // The host of X did not carry Y's position past events Y's hosts had not dispatched.
    const { rows } = await database.db.query(
      `SELECT consumer FROM cyclium_bus_positions ORDER BY consumer`,
    );
    expect(rows.map((r) => r.consumer)).toEqual(['bus_x.on_x', 'bus_y.on_y']);
  });

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`runs a debounce pending at ${signal} of its only node once, after the node's restart`, async () => {
      const env = { BUS_DEBOUNCE_MS: '1500' };
      const node = await boot('debouncer', 'debounce', env);
      const subject = `pending-${signal}`;
      const ids = [1, 2, 3].map((i) => `${subject}-${i}`);
      for (const id of ids) await publish(node, 'test.d', id, { subject });
      await node.stop(signal);
      expect((await episodesByEvent('bus_debounce')).get(ids[2] as string)).toBeUndefined();

      await boot('debouncer', 'debounce', env);
      await waitFor(
        'the window to fire',
        async () => (await episodesByEvent('bus_debounce')).has(ids[2] as string),
        20_000,
      );
      const byEvent = await episodesByEvent('bus_debounce');
      expect(ids.map((id) => byEvent.get(id) ?? 0)).toEqual([0, 0, 1]);
    });
  }

  it('keeps a cooldown begun before a node booted: the next event within it runs nothing, one after runs', async () => {
    const cooldownMs = 20_000;
    const env = { BUS_COOLDOWN_MS: String(cooldownMs) };
    const subject = { subject: 'cooling' };
    const passed = (eventId: string) =>
      database.db
        .query<{ passed: boolean }>(
          `SELECT pg_visible_in_snapshot(e.tx_id, p.position) AS passed FROM cyclium_events e
             JOIN cyclium_bus_positions p ON p.channel = e.channel AND p.consumer = 'bus_cool.on_cool'
            WHERE e.event_id = $1`,
          [eventId],
        )
        .then(({ rows }) => rows[0]?.passed === true);
    const live = await boot('cool-live', 'cool', env);
    await publish(live, 'test.c', 'cool-1', subject);
    await waitFor('the first episode', async () =>
      (await episodesByEvent('bus_cool')).has('cool-1'),
    );
    // Stored past it: a node that boots now starts reading after the event that began the cooldown.
    await waitFor('the position past the first event', () => passed('cool-1'));
    await live.stop('SIGKILL');

    const late = await boot('cool-late', 'cool', env);
    await publish(late, 'test.c', 'cool-2', subject);
    await waitFor('the second event settled', () => passed('cool-2'), 10_000);
    const { rows } = await database.db.query<{ within: boolean }>(
      `SELECT b.created_at < a.created_at + make_interval(secs => $1::float8 / 1000) AS within
         FROM cyclium_events a, cyclium_events b WHERE a.event_id = 'cool-1' AND b.event_id = 'cool-2'`,
      [cooldownMs],
    );
    expect(rows[0]?.within).toBe(true);
    // Before, the node that booted knew no cooldown and ran it.
    expect((await episodesByEvent('bus_cool')).has('cool-2')).toBe(false);

    const ended = `SELECT now() > created_at + make_interval(secs => $1::float8 / 1000) AS ended
                     FROM cyclium_events WHERE event_id = 'cool-1'`;
    const over = async () =>
      (await database.db.query(ended, [cooldownMs])).rows[0]?.ended as boolean;
    await waitFor('the cooldown to end', over, 30_000, 200);
    await publish(late, 'test.c', 'cool-3', subject);
    await waitFor('the episode after the cooldown', async () =>
      (await episodesByEvent('bus_cool')).has('cool-3'),
    );
    const byEvent = await episodesByEvent('bus_cool');
    expect(['cool-1', 'cool-2', 'cool-3'].map((id) => byEvent.get(id) ?? 0)).toEqual([1, 0, 1]);
  }, 120_000);

  it('groups a window by committed time on a node that boots in the middle of it, as the live node did', async () => {
    const debounceMs = 6_000;
    const env = { BUS_DEBOUNCE_MS: String(debounceMs) };
    const live = await boot('window-live', 'debounce', env);
    const subject = 'mid-window';
    const ids = [1, 2].map((i) => `${subject}-${i}`);
    for (const id of ids) await publish(live, 'test.d', id, { subject });
    await boot('window-late', 'debounce', env);
    // The live node dies before the window closes: only the late node can fire it.
    await live.stop('SIGKILL');

    await waitFor(
      'the window to fire',
      async () => (await episodesByEvent('bus_debounce')).has(ids[1] as string),
      20_000,
    );
    const byEvent = await episodesByEvent('bus_debounce');
    expect(ids.map((id) => byEvent.get(id) ?? 0)).toEqual([0, 1]);
    // It fired when the window closed by the events' committed time, not a debounce after the late node read them.
    const { rows } = await database.db.query<{ late_ms: number }>(
      `SELECT (extract(epoch FROM coalesce(e.queued_at, e.started_at) - v.created_at) * 1000)::int AS late_ms
         FROM cyclium_episodes e JOIN cyclium_events v ON v.event_id = e.trigger_ref->>'eventId'
        WHERE e.actor_id = 'bus_debounce' AND v.event_id = $1`,
      [ids[1]],
    );
    expect(rows[0]?.late_ms).toBeGreaterThanOrEqual(debounceMs - 50);
    expect(rows[0]?.late_ms).toBeLessThan(debounceMs + 2_000);
  });
});
