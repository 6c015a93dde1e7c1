import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startAll, startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const WAITS_NODE = fileURLToPath(new URL('./fixtures/dist/waits-node.js', import.meta.url));
const POLL_MS = 500;

function startWaitsNode(url: string, id: string, idleMs?: number): Promise<DemoNode> {
  return startNodeProcess(WAITS_NODE, url, {
    env: {
      CYCLIUM_NODE_ID: id,
      WAITS_POLL_MS: String(POLL_MS),
      ...(idleMs ? { WAITS_IDLE_POLL_MS: String(idleMs) } : {}),
    },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

async function post<T>(node: DemoNode, path: string, body: object = {}): Promise<T> {
  const response = await fetch(`http://127.0.0.1:${node.port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.status >= 300)
    throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

/**
 * Waits against real node processes that die: an episode waiting for a signal resumes on a live
 * node when its own node was `kill -9`-ed, a deadline ends a wait by its timeout branch within a
 * poll interval (with idle polls, within the idle interval once the node that wrote it is gone), and a stop of the whole cluster during a signal, an event and a children wait
 * loses none of them.
 */
describe('waits under kill -9 and whole-cluster stops', () => {
  const database = useDatabase(3);
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    await database.db.query(`CREATE TABLE wait_runs (episode_id uuid, what text)`);
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const start = async (id: string, idleMs?: number) => {
    const node = await startWaitsNode(database.url, id, idleMs);
    nodes.push(node);
    return node;
  };
  /** Nodes that boot together, none of them doing anything yet: up in the time of one boot. */
  const startBoth = (first: string, second: string, idleMs?: number) =>
    startAll([start(first, idleMs), start(second, idleMs)]);
  const trigger = async (node: DemoNode, what: string, payload: object) =>
    (await post<{ episodeId: string }>(node, `/trigger/${what}`, payload)).episodeId;
  const row = async (id: string) =>
    (
      await database.db.query<{
        status: string;
        result: unknown;
        waiting_for: { kind: string; deadline: string | null } | null;
        finished_at: Date | null;
      }>(`SELECT status, result, waiting_for, finished_at FROM cyclium_episodes WHERE id = $1`, [
        id,
      ])
    ).rows[0];
  const runsOf = async (id: string) =>
    Number(
      (
        await database.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM wait_runs WHERE episode_id = $1`,
          [id],
        )
      ).rows[0]?.n,
    );
  const ended = (id: string, ms = 30_000) =>
    waitFor(
      `episode ${id} to end`,
      async () => {
        const r = await row(id);
        return r && ['done', 'failed', 'canceled'].includes(r.status) ? r : undefined;
      },
      ms,
      100,
    );
  const waiting = (id: string, kind: string) =>
    waitFor(`episode ${id} to wait for ${kind}`, async () => {
      const r = await row(id);
      return r?.status === 'waiting' && r.waiting_for?.kind === kind ? r : undefined;
    });

  it('a signal sent through another node resumes a wait whose node was kill -9-ed', async () => {
    const [one, two] = await startBoth('wf-1', 'wf-2');
    const id = await trigger(one, 'approvals/approve', { timeoutMs: 30_000 });
    await waiting(id, 'signal');
    await one.stop('SIGKILL');
    expect(await post(two, `/signal/${id}/approve`, { by: 'ann' })).toMatchObject({
      status: 'sent',
      woke: true,
    });
    const done = await ended(id);
    expect(done).toMatchObject({ status: 'done', result: { first: 'ann' } });
    // The first run, and one resume on the live node.
    expect(await runsOf(id)).toBe(2);
    const deliveries = await database.db.query(
      `SELECT delivered_step FROM cyclium_signals WHERE episode_id = $1 AND delivered_at IS NOT NULL`,
      [id],
    );
    expect(deliveries.rowCount).toBe(1);
    await two.stop('SIGKILL');
  });

  it('signals sent before the waits began are kept, and feed two successive waits once each', async () => {
    const node = await start('wf-early');
    const id = await trigger(node, 'approvals/approve', { beforeMs: 1_500, twice: true });
    // Sent while the episode runs its first step: neither wait has begun.
    await post(node, `/signal/${id}/approve`, { by: 'first' });
    await post(node, `/signal/${id}/approve`, { by: 'second' });
    expect((await row(id))?.status).toBe('running');
    const done = await ended(id);
    expect(done).toMatchObject({ status: 'done', result: { first: 'first', second: 'second' } });
    // Each took a signal that was already there: the episode never went waiting.
    const parked = await database.db.query(
      `SELECT 1 FROM cyclium_trigger_requests WHERE episode_id = $1 AND opts ->> 'wake' = 'wait'`,
      [id],
    );
    expect(parked.rowCount).toBe(0);
    const delivered = await database.db.query<{ step: number; by: string }>(
      `SELECT delivered_step AS step, payload ->> 'by' AS by FROM cyclium_signals
        WHERE episode_id = $1 ORDER BY id`,
      [id],
    );
    expect(delivered.rows).toEqual([
      { step: 2, by: 'first' },
      { step: 3, by: 'second' },
    ]);
    await node.stop('SIGKILL');
  });

  it('ends a wait by its timeout branch within a poll interval of its deadline', async () => {
    const node = await start('wf-3');
    const id = await trigger(node, 'approvals/approve', { timeoutMs: 2_000 });
    const parked = await waiting(id, 'signal');
    const deadline = Date.parse(parked?.waiting_for?.deadline as string);
    const done = await ended(id);
    expect(done).toMatchObject({ status: 'done', result: { timedOut: true } });
    const lateMs = new Date(done?.finished_at as Date).getTime() - deadline;
    console.log(`timeout branch ended ${lateMs} ms after the deadline (poll ${POLL_MS} ms)`);
    expect(lateMs).toBeGreaterThanOrEqual(0);
    // One poll interval, plus the resume's own statements on a loaded machine.
    expect(lateMs).toBeLessThanOrEqual(POLL_MS + 1_000);
    await node.stop('SIGKILL');
  });

  it('with idle polls: a deadline is met within a poll interval by the node that wrote it, and within the idle interval by another once that node is kill -9-ed', async () => {
    const IDLE_MS = 6_000;
    const [a, b] = await startBoth('wf-idle-a', 'wf-idle-b', IDLE_MS);
    const lateness = async (id: string) => {
      const parked = await waiting(id, 'signal');
      const done = await ended(id);
      expect(done).toMatchObject({ status: 'done', result: { timedOut: true } });
      return (
        new Date(done?.finished_at as Date).getTime() -
        Date.parse(parked?.waiting_for?.deadline as string)
      );
    };
    // Both nodes idle (nothing due): only the writer's own note of the deadline polls on time.
    const own = await lateness(await trigger(a, 'approvals/approve', { timeoutMs: 2_000 }));
    const orphan = await trigger(a, 'approvals/approve', { timeoutMs: 2_000 });
    await waiting(orphan, 'signal');
    await a.stop('SIGKILL');
    const other = await lateness(orphan);
    console.log(
      `idle polls (${IDLE_MS} ms, ticks ${POLL_MS} ms): a deadline met ${own} ms late by its ` +
        `own node, ${other} ms late by another once its node was gone`,
    );
    expect(own).toBeGreaterThanOrEqual(0);
    expect(own).toBeLessThanOrEqual(POLL_MS + 1_000);
    expect(other).toBeGreaterThanOrEqual(0);
    expect(other).toBeLessThanOrEqual(IDLE_MS + POLL_MS + 1_000);
    await b.stop('SIGKILL');
  }, 120_000);

  it('a whole-cluster stop during a signal, an event and a children wait loses none of them', async () => {
    const [a, b] = await startBoth('wf-4', 'wf-5');
    const signalled = await trigger(a, 'approvals/approve', {});
    const paid = await trigger(b, 'payments/pay', { orderId: 'o-stop' });
    const parent = await trigger(a, 'fanout/parent', { n: 3, workMs: 4_000 });
    await waiting(signalled, 'signal');
    await waiting(paid, 'event');
    await waiting(parent, 'children');
    await Promise.all([a.stop('SIGKILL'), b.stop('SIGKILL')]);
    // Sent and published while no node is up: stored, each wake-up due for whoever comes next.
    const [c, d] = await startBoth('wf-6', 'wf-7');
    expect(await post(c, `/signal/${signalled}/approve`, { by: 'after-stop' })).toMatchObject({
      status: 'sent',
    });
    await post(d, '/publish/payment.settled', { orderId: 'o-stop', amount: 42 });
    expect(await ended(signalled)).toMatchObject({
      status: 'done',
      result: { first: 'after-stop' },
    });
    expect(await ended(paid)).toMatchObject({ status: 'done', result: { amount: 42 } });
    // Its children were running (or queued) when the cluster stopped: they finish on the new nodes.
    expect(await ended(parent, 60_000)).toMatchObject({
      status: 'done',
      result: { sum: 6, children: 3 },
    });
  }, 180_000);

  it('the operations API shows what an episode waits for, its children, and sends a signal', async () => {
    const node = await start('wf-ops');
    const ops = async (method: 'GET' | 'POST', path: string, body?: object) => {
      const response = await fetch(`http://127.0.0.1:${node.port}/ops/api${path}`, {
        method,
        headers: { 'content-type': 'application/json', 'x-cyclium-ops': '1' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    const approval = await trigger(node, 'approvals/approve', { timeoutMs: 60_000 });
    const parent = await trigger(node, 'fanout/parent', { n: 2, workMs: 60_000 });
    await waiting(approval, 'signal');
    await waiting(parent, 'children');
    const listed = await ops('GET', '/episodes?status=waiting');
    const items = listed.body.items as Array<{ id: string; wait: unknown; waitingFor: string }>;
    expect(items.find((e) => e.id === approval)).toMatchObject({
      waitingFor: 'wait',
      wait: { kind: 'signal', name: 'approve', deadline: expect.any(String) },
    });
    const detail = await ops('GET', `/episodes/${parent}`);
    expect(detail.body.episode).toMatchObject({
      status: 'waiting',
      dueAt: null,
      wait: {
        kind: 'children',
        deadline: null,
        children: [
          { id: expect.any(String), status: expect.stringMatching(/running|deferred|queued/) },
          { id: expect.any(String), status: expect.stringMatching(/running|deferred|queued/) },
        ],
      },
    });
    expect((await ops('POST', `/episodes/${approval}/signal`, { payload: {} })).status).toBe(400);
    expect(
      (await ops('POST', `/episodes/00000000-0000-4000-8000-000000000000/signal`, { name: 'x' }))
        .status,
    ).toBe(404);
    const sent = await ops('POST', `/episodes/${approval}/signal`, {
      name: 'approve',
      payload: { by: 'operator' },
    });
    expect(sent).toMatchObject({ status: 200, body: { status: 'sent', woke: true } });
    expect(await ended(approval)).toMatchObject({ result: { first: 'operator' } });
    expect((await ops('POST', `/episodes/${approval}/signal`, { name: 'approve' })).status).toBe(
      409,
    );
    // Cancel from the page's API reaches a waiting parent and its children.
    expect((await ops('POST', `/episodes/${parent}/cancel`)).body).toEqual({ result: 'canceled' });
    expect(await ended(parent)).toMatchObject({ status: 'canceled' });
  }, 120_000);
});
