import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import { startNode } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

const ENV = { DEMO_JITTER_MS: '0', DEMO_ADVISOR_EVERY: '1h', DEMO_DB_POOL: '3' };
const CSRF = { 'x-cyclium-ops': '1', 'content-type': 'application/json' };

interface Episode {
  id: string;
  sourceEnv: string | null;
}

/**
 * Two envs in one database, a demo node each: each node's operations module shows and acts on its
 * own env's episodes only (the default scope), as if the other's did not exist.
 */
describe('an operations module keeps to its own stack and env', () => {
  const database = useDatabase();
  let blue: DemoNode;
  let green: DemoNode;

  const call = async (node: DemoNode, method: 'GET' | 'POST', path: string, body?: unknown) => {
    const response = await fetch(`http://127.0.0.1:${node.port}/ops/api${path}`, {
      method,
      headers: method === 'POST' ? CSRF : {},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  /** A slow rebalance started on `node`, in its env. */
  const startOn = async (node: DemoNode, resource: string) => {
    const response = await fetch(
      `http://127.0.0.1:${node.port}/actors/resource_rebalancer/rebalance_once`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ payload: { resource, stepMs: 20_000 } }),
      },
    );
    return ((await response.json()) as { episodeId: string }).episodeId;
  };

  beforeAll(async () => {
    [blue, green] = await Promise.all([
      startNode(database.url, 'blue-1', { ...ENV, CYCLIUM_ENV: 'blue' }),
      startNode(database.url, 'green-1', { ...ENV, CYCLIUM_ENV: 'green' }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([blue, green].map((node) => node?.stop('SIGKILL')));
  });

  it("lists, reads and acts on its own env's episodes only", async () => {
    const mine = await startOn(blue, 'blue-rack');
    const theirs = await startOn(green, 'green-rack');
    const listed = await waitFor('both listed by their own nodes', async () => {
      const b = (await call(blue, 'GET', '/episodes')).body.items as Episode[];
      const g = (await call(green, 'GET', '/episodes')).body.items as Episode[];
      return b.length > 0 && g.length > 0 ? { b, g } : undefined;
    });
    expect(listed?.b.map((e) => e.id)).toEqual([mine]);
    expect(listed?.g.map((e) => e.id)).toEqual([theirs]);

    // The other env's episode does not exist for this module: read, cancel, retry, archive, signal.
    expect((await call(blue, 'GET', `/episodes/${theirs}`)).status).toBe(404);
    for (const verb of ['cancel', 'retry', 'archive'])
      expect((await call(blue, 'POST', `/episodes/${theirs}/${verb}`, {})).status).toBe(404);
    expect((await call(blue, 'POST', `/episodes/${theirs}/signal`, { name: 'go' })).status).toBe(
      404,
    );
    const bulk = await call(blue, 'POST', '/episodes/cancel-matching', {});
    expect(bulk.body).toMatchObject({ matched: 1 });
    // A filter naming another env is refused, naming the field.
    const other = await call(blue, 'GET', '/episodes?env=green');
    expect(other.status).toBe(403);
    expect(String(other.body.message)).toMatch(/^env: this operations module shows its own/);

    // Its own: canceled by the bulk call above; the other env's runs on.
    const state = async (node: DemoNode, id: string) =>
      ((await call(node, 'GET', `/episodes/${id}`)).body.episode as { status: string }).status;
    await waitFor('its own to end canceled', async () => (await state(blue, mine)) === 'canceled');
    expect(await state(green, theirs)).toBe('running');
  });
});
