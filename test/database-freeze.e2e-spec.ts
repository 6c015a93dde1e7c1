import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, rebalanceOn, startNode, stepsJournaled } from './support/demo-cluster.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

const CHECKOUT_TIMEOUT_MS = 1_500;
const QUERY_TIMEOUT_MS = 2_500;
/** The documented bound (docs/guides/database-outages.md) for a call that meets a frozen database: checkoutTimeoutMs + queryTimeoutMs. */
const BOUND_MS = CHECKOUT_TIMEOUT_MS + QUERY_TIMEOUT_MS;
/** What a loaded machine adds on top (HTTP, the event loop, the test's own fetch). */
const SLACK_MS = 1_000;

const ENV = {
  ...FAST_RECOVERY,
  DEMO_CHECKOUT_TIMEOUT_MS: String(CHECKOUT_TIMEOUT_MS),
  DEMO_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
};

interface Ended {
  id: string;
  status: string;
  error_class: string | null;
  event_id: string | null;
  dedupe_key: string | null;
}

interface Answer {
  status: number;
  ms: number;
}

/**
 * The database stops answering (a proxy that stops forwarding both ways with every socket left
 * open, which is what a SIGSTOPped server looks like to its clients) under three demo nodes. The
 * shared test server is not stopped: other files use it at the same time.
 */
describe('the database freezes under three nodes', () => {
  const database = useDatabase();
  let proxy: TcpProxy;
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    proxy = await TcpProxy.start({ target: database.url });
    const url = proxy.url(database.url);
    nodes.push(
      ...(await Promise.all(
        ['freeze-1', 'freeze-2', 'freeze-3'].map((id) => startNode(url, id, ENV)),
      )),
    );
  });

  afterAll(async () => {
    proxy?.thaw();
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    await proxy?.close();
  });

  /** One request, timed; status 0 when the test's own deadline (well past the bound) ran out first. */
  const call = async (node: DemoNode, path: string, body?: unknown): Promise<Answer> => {
    const started = performance.now();
    const status = await fetch(`http://127.0.0.1:${node.port}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(BOUND_MS * 3),
    }).then(
      (response) => response.status,
      () => 0,
    );
    return { status, ms: Math.round(performance.now() - started) };
  };

  const publish = (node: DemoNode, eventId: string) =>
    call(node, '/events', {
      type: 'resource.updated',
      eventId,
      payload: { resource: eventId, usage: 50 },
    });

  /** A short rebalance started on `node` under the dedupe key `frozen-key-<key>`. */
  const trigger = (node: DemoNode, key: string) =>
    call(node, '/actors/resource_rebalancer/rebalance', {
      payload: { resource: `key-${key}`, stepMs: 50 },
      dedupeKey: `frozen-key-${key}`,
    });

  it('answers 503 within checkout + query timeout, and every episode ends by its policy once it thaws', async () => {
    const restartable = await Promise.all(
      nodes.flatMap((node, i) =>
        [0, 1].map((j) => rebalanceOn(node, { resource: `frz-${i}${j}`, stepMs: 400 })),
      ),
    );
    const failFast = await rebalanceOn(
      nodes[0] as DemoNode,
      { resource: 'frz-once', stepMs: 1_000 },
      'rebalance_once',
    );
    for (const [i, node] of nodes.entries())
      expect((await publish(node, `before-${i}`)).status).toBe(202);
    await waitFor('every rebalance to pass a step', async () =>
      (
        await Promise.all([...restartable, failFast].map((id) => stepsJournaled(database.db, id)))
      ).every((steps) => steps.length >= 1),
    );

    proxy.freeze();
    // Twice: first with idle connections in every pool (a statement sent, no answer), then with the
    // pools full of connections that wait (no connection to be had).
    const answers: Array<Answer & { what: string }> = [];
    const frozen: string[] = [];
    for (const round of [1, 2]) {
      const calls = nodes.flatMap((node, i) => {
        const key = `${round}-${i}`;
        frozen.push(key);
        const on = `on node ${i + 1}, round ${round}`;
        return [
          publish(node, `frozen-${key}`).then((a) => ({ ...a, what: `POST /events ${on}` })),
          call(node, `/episodes/${restartable[i * 2]}`).then((a) => ({
            ...a,
            what: `GET /episodes/:id ${on}`,
          })),
          trigger(node, key).then((a) => ({ ...a, what: `POST /actors/… with a dedupeKey ${on}` })),
        ];
      });
      answers.push(...(await Promise.all(calls)));
    }
    for (const answer of answers) {
      expect({
        what: answer.what,
        status: answer.status,
        inBound: answer.ms <= BOUND_MS + SLACK_MS,
        ms: answer.ms,
      }).toEqual({
        what: answer.what,
        status: 503,
        inBound: true,
        ms: answer.ms,
      });
    }
    for (const node of nodes)
      expect({ exitCode: node.process.exitCode, signal: node.process.signalCode }).toEqual({
        exitCode: null,
        signal: null,
      });

    const thawedAt = (await database.db.query<{ now: Date }>('SELECT now()')).rows[0]?.now;
    proxy.thaw();

    // A call that answered 503 may or may not have taken effect (its bytes were on the wire): a
    // retry with the same eventId or dedupeKey is accepted, and stored or started once.
    const frozenIds = frozen.map((key) => `frozen-${key}`);
    for (const [k, key] of frozen.entries()) {
      const node = nodes[(k + 1) % nodes.length] as DemoNode;
      await waitFor(
        `the retry of event frozen-${key} to be accepted`,
        async () => (await publish(node, `frozen-${key}`)).status === 202,
        10_000,
        100,
      );
      await waitFor(
        `the retry of dedupeKey frozen-key-${key} to be accepted`,
        async () => (await trigger(node, key)).status === 202,
        10_000,
        100,
      );
    }
    // The beat, the renewer, the sweeps and the bus reader failed their ticks while it was frozen, and work again.
    await waitFor(
      'every node to beat again',
      async () =>
        (await database.db.query(`SELECT 1 FROM cyclium_nodes WHERE last_seen_at > $1`, [thawedAt]))
          .rowCount === nodes.length,
    );

    const episodes = restartable.length + 1 + frozen.length + nodes.length + frozenIds.length;
    const ended = (await waitFor(
      'every episode to end',
      async () => {
        const { rows } = await database.db.query<Ended>(
          `SELECT id, status, error_class, trigger_ref->>'eventId' AS event_id, dedupe_key FROM cyclium_episodes`,
        );
        return rows.length >= episodes &&
          rows.every((r) => r.status !== 'running' && r.status !== 'queued')
          ? rows
          : undefined;
      },
      20_000,
      200,
    )) as Ended[];
    // The restart policy: done (restarted from its checkpoint where the freeze cost the claim).
    // The fail policy: done when the freeze spared it, else failed as an orphan. Never a crash.
    for (const id of restartable)
      expect(ended.find((r) => r.id === id)).toMatchObject({ status: 'done', error_class: null });
    expect([
      ['done', null],
      ['failed', 'orphaned'],
    ]).toContainEqual([
      ended.find((r) => r.id === failFast)?.status,
      ended.find((r) => r.id === failFast)?.error_class ?? null,
    ]);
    // One event row and one episode per event id, the retried ones included.
    const perEvent = await database.db.query<{ event_id: string; n: number }>(
      `SELECT event_id, count(*)::int AS n FROM cyclium_events WHERE type = 'resource.updated' GROUP BY 1`,
    );
    expect(perEvent.rows.map((r) => r.event_id).sort()).toEqual(
      [...nodes.map((_, i) => `before-${i}`), ...frozenIds].sort(),
    );
    expect(perEvent.rows.every((r) => r.n === 1)).toBe(true);
    const monitors = ended.filter((r) => r.event_id !== null);
    expect(monitors.map((r) => r.event_id).sort()).toEqual(
      perEvent.rows.map((r) => r.event_id).sort(),
    );
    expect(monitors.every((r) => r.status === 'done')).toBe(true);
    const retried = ended.filter((r) => r.dedupe_key?.startsWith('frozen-key-'));
    expect(retried.map((r) => r.dedupe_key).sort()).toEqual(
      frozen.map((k) => `frozen-key-${k}`).sort(),
    );
    expect(retried.every((r) => r.status === 'done')).toBe(true);
    for (const node of nodes)
      expect({ exitCode: node.process.exitCode, signal: node.process.signalCode }).toEqual({
        exitCode: null,
        signal: null,
      });
  }, 180_000);
});
