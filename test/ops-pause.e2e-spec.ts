import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Browser, Page } from 'playwright-core';
import { useDatabase } from './support/database.js';
import { FAST_RECOVERY, startNode } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { launchChromium } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

const ENV = {
  ...FAST_RECOVERY,
  DEMO_NODE_BEAT_MS: '2000',
  DEMO_JITTER_MS: '0',
  DEMO_ADVISOR_EVERY: '1h',
  DEMO_DB_POOL: '4',
};
const ACTOR = 'resource_rebalancer';

interface Episode {
  id: string;
  status: string;
}

/**
 * An actor paused from the operations page of one node stops starting on every node of its stack
 * and env (one that boots during the pause included), while other actors run on; its triggers wait
 * and run once it is resumed. Real demo nodes, one database.
 */
describe('pausing an actor cluster-wide from the operations page', () => {
  const database = useDatabase();
  const nodes = new Map<string, DemoNode>();
  let browser: Browser | undefined;
  let page: Page;

  const node = (id: string) => nodes.get(id) as DemoNode;
  const ops = <T>(id: string, path: string) => node(id).get<T>(`/ops/api${path}`);
  const post = async (id: string, path: string, body: unknown, headers = {}) => {
    const response = await fetch(`http://127.0.0.1:${node(id).port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  /** A manual trigger taken by node `id` (it would run there, were the actor not paused). */
  const rebalanceOn = async (id: string, resource: string) => {
    const answer = await post(id, `/actors/${ACTOR}/rebalance_once`, {
      payload: { resource, stepMs: 10 },
    });
    expect(answer.status).toBe(202);
    return answer.body as { status: string; episodeId: string };
  };
  const statusOf = async (id: string) =>
    (await ops<{ episode: Episode }>('p-1', `/episodes/${id}`)).episode.status;
  const pausedOn = async (id: string) =>
    (await ops<{ modes: { pausedActors: string[] } }>(id, '/node')).modes.pausedActors.includes(
      ACTOR,
    );
  const row = () => page.locator(`[data-testid="actor-row"][data-actor="${ACTOR}"]`);

  beforeAll(async () => {
    const launching = launchChromium();
    const started = await Promise.allSettled(
      ['p-1', 'p-2'].map((id) => startNode(database.url, id, ENV)),
    );
    started.forEach((s, i) => s.status === 'fulfilled' && nodes.set(`p-${i + 1}`, s.value));
    browser = await launching;
    for (const s of started) if (s.status === 'rejected') throw s.reason;
    page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(15_000);
  });

  afterAll(async () => {
    await browser?.close();
    await Promise.all([...nodes.values()].map((n) => n.stop('SIGKILL')));
  });

  it('pauses it on every node, a node booted meanwhile included; its work waits, other actors run, and it all runs on resume', async () => {
    await page.goto(`http://127.0.0.1:${node('p-1').port}/ops`);
    await waitFor('the actor listed running', async () =>
      (await row().getAttribute('data-paused')) === 'false' ? true : undefined,
    );
    await row().getByTestId('actor-toggle').click();
    expect(await page.getByTestId('confirm-question').textContent()).toContain(`Pause ${ACTOR}`);
    await page.getByTestId('confirm-reason').fill('disk swap');
    await page.getByTestId('confirm-ok').click();
    await waitFor('the page to show it paused', async () =>
      (await row().getAttribute('data-paused')) === 'true' ? true : undefined,
    );
    expect(await row().getByTestId('actor-state').textContent()).toContain('disk swap');
    // The other node hears of it on the bus, well before its next beat would read it.
    const pausedAt = Date.now();
    await waitFor('p-2 to hold it paused', () => pausedOn('p-2'), 10_000, 50);
    process.stdout.write(`p-2 paused ${Date.now() - pausedAt} ms after the page showed it\n`);

    // Work of the paused actor waits, on whichever node takes it; another actor's runs.
    const held = [await rebalanceOn('p-2', 'held-a'), await rebalanceOn('p-1', 'held-b')];
    for (const h of held) expect(h.status).toBe('deferred');
    nodes.set('p-3', await startNode(database.url, 'p-3', ENV));
    expect(await pausedOn('p-3')).toBe(true);
    held.push(await rebalanceOn('p-3', 'held-c'));
    expect(held[2]?.status).toBe('deferred');
    const monitor = await post('p-2', '/events', {
      type: 'resource.updated',
      payload: { resource: 'db-1', usage: 1 },
    });
    expect(monitor.status).toBe(202);
    const other = await waitFor(
      'the monitor episode to end done',
      async () => {
        const { items } = await ops<{ items: Episode[] }>(
          'p-1',
          `/episodes?eventId=${String(monitor.body.eventId)}`,
        );
        return items[0]?.status === 'done' ? items[0] : undefined;
      },
      15_000,
      100,
    );
    expect(other?.status).toBe('done');
    // For three beats, none of the paused actor's starts anywhere (sampled all along).
    for (const until = Date.now() + 6_000; Date.now() < until;) {
      for (const h of held) expect(await statusOf(h.episodeId)).toBe('deferred');
      await new Promise((r) => setTimeout(r, 250));
    }

    await row().getByTestId('actor-toggle').click();
    expect(await page.getByTestId('confirm-question').textContent()).toContain(`Resume ${ACTOR}`);
    await page.getByTestId('confirm-ok').click();
    await waitFor('the page to show it running', async () =>
      (await row().getAttribute('data-paused')) === 'false' ? true : undefined,
    );
    await waitFor(
      'the held work to run to done',
      async () => {
        for (const h of held) if ((await statusOf(h.episodeId)) !== 'done') return false;
        return true;
      },
      30_000,
      200,
    );
    for (const id of ['p-1', 'p-2', 'p-3']) expect(await pausedOn(id)).toBe(false);
  }, 120_000);

  it('leaves a run orphaned by a kill -9 during the pause waiting, and runs it after the resume', async () => {
    const headers = { 'x-cyclium-ops': '1' };
    // A five-step rebalance (recovery policy restart) running on p-2, then the pause, then the kill.
    const started = await post('p-2', `/actors/${ACTOR}/rebalance`, {
      payload: { resource: 'orphan', stepMs: 1_500 },
    });
    const id = String(started.body.episodeId);
    await waitFor('it to run on p-2', async () => (await statusOf(id)) === 'running', 15_000, 50);
    expect((await post('p-1', `/ops/api/actors/${ACTOR}/pause`, {}, headers)).status).toBe(200);
    await waitFor('p-2 to hold it paused', () => pausedOn('p-2'), 10_000, 50);
    node('p-2').process.kill('SIGKILL');
    // Recovery finds the orphan: restarted, it would run on p-1 or p-3; paused, it waits.
    await waitFor(
      'the sweep to defer it',
      async () => (await statusOf(id)) === 'deferred',
      30_000,
      100,
    );
    for (const until = Date.now() + 3_000; Date.now() < until;) {
      expect(await statusOf(id)).toBe('deferred');
      await new Promise((r) => setTimeout(r, 250));
    }
    expect((await post('p-1', `/ops/api/actors/${ACTOR}/resume`, {}, headers)).status).toBe(200);
    await waitFor('it to run to done', async () => (await statusOf(id)) === 'done', 30_000, 200);
  }, 120_000);

  it('answers 404 for an actor this node does not declare, 400 naming a bad field, and needs the header', async () => {
    const headers = { 'x-cyclium-ops': '1' };
    expect((await post('p-1', '/ops/api/actors/nobody/pause', {}, headers)).status).toBe(404);
    const bad = await post('p-1', `/ops/api/actors/${ACTOR}/pause`, { why: 'x' }, headers);
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body.message)).toContain('why');
    expect((await post('p-1', `/ops/api/actors/${ACTOR}/pause`, {})).status).toBe(403);
    expect(await pausedOn('p-1')).toBe(false);
  });
});
