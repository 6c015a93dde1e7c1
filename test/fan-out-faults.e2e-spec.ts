import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const WAITS_NODE = fileURLToPath(new URL('./fixtures/dist/waits-node.js', import.meta.url));
const CHILDREN = 200;

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

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Fan-out and fan-in across real node processes: a parent starts 200 children, which every node
 * runs, and waits for them all, while one node is `kill -9`-ed and then the whole cluster is
 * stopped once; a second parent is canceled part way and its running children with it.
 */
describe('child episodes across three nodes under kill -9 and a whole-cluster stop', () => {
  const database = useDatabase(3);
  const nodes: DemoNode[] = [];
  let started = 0;

  beforeAll(async () => {
    await database.db.query(`CREATE TABLE wait_runs (episode_id uuid, what text)`);
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const start = async () => {
    const node = await startNodeProcess(WAITS_NODE, database.url, {
      env: { CYCLIUM_NODE_ID: `fan-${++started}` },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    nodes.push(node);
    return node;
  };
  const query = async <T>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];
  const statusOf = async (id: string) =>
    (await query<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]))[0]
      ?.status;
  const childrenOf = (parent: string) =>
    query<{ id: string; status: string; owner_node: string | null; finished_at: Date | null }>(
      `SELECT id, status, owner_node, finished_at FROM cyclium_episodes
        WHERE trigger_ref -> 'parent' ->> 'episodeId' = $1`,
      [parent],
    );

  it('200 children run once each and the parent wakes once for all of them', async () => {
    const live = [await start(), await start(), await start()];
    const { episodeId: parent } = await post<{ episodeId: string }>(
      live[0] as DemoNode,
      '/trigger/fanout/parent',
      { n: CHILDREN, workMs: 300 },
    );
    // One node dies while the parent starts its children and they run.
    await waitFor('some children to be running', async () =>
      (await childrenOf(parent)).some((c) => c.status === 'running'),
    );
    await (live[1] as DemoNode).stop('SIGKILL');
    live[1] = await start();
    // Then the whole cluster, once the parent waits (or while it still starts children).
    await waitFor(
      'a third of the children to end',
      async () =>
        (await childrenOf(parent)).filter((c) => c.status === 'done').length >= CHILDREN / 3,
      60_000,
      100,
    );
    await Promise.all(live.map((node) => node.stop('SIGKILL')));
    await pause(500);
    for (let i = 0; i < 3; i++) await start();
    await waitFor(
      'the parent to end',
      async () => ['done', 'failed', 'canceled'].includes((await statusOf(parent)) ?? ''),
      120_000,
      250,
    );
    const [ended] = await query<{ status: string; result: unknown }>(
      `SELECT status, result FROM cyclium_episodes WHERE id = $1`,
      [parent],
    );
    expect(ended).toEqual({
      status: 'done',
      result: { sum: CHILDREN * (CHILDREN - 1), children: CHILDREN },
    });
    const children = await childrenOf(parent);
    expect(children).toHaveLength(CHILDREN);
    expect(children.every((c) => c.status === 'done')).toBe(true);
    // Every child's step is journaled once; it may have run again only where a kill caught it.
    const [steps] = await query<{ journaled: string; ran: string }>(
      `SELECT (SELECT count(*) FROM cyclium_episode_steps s JOIN cyclium_episodes e
                 ON e.id = s.episode_id
                WHERE e.trigger_ref -> 'parent' ->> 'episodeId' = $1 AND s.name = 'work')
                AS journaled,
              (SELECT count(*) FROM wait_runs w JOIN cyclium_episodes e ON e.id = w.episode_id
                WHERE e.trigger_ref -> 'parent' ->> 'episodeId' = $1 AND w.what = 'child-step')
                AS ran`,
      [parent],
    );
    expect(Number(steps?.journaled)).toBe(CHILDREN);
    expect(Number(steps?.ran)).toBeGreaterThanOrEqual(CHILDREN);
    const owners = new Set(children.map((c) => c.owner_node));
    // The children wait was woken once, by its last child's end.
    const [wakes] = await query<{ n: string }>(
      `SELECT count(*) AS n FROM cyclium_trigger_requests
        WHERE episode_id = $1 AND opts ->> 'wake' = 'wait' AND claimed_by IS NOT NULL`,
      [parent],
    );
    const [runs] = await query<{ n: string }>(
      `SELECT count(*) AS n FROM wait_runs WHERE episode_id = $1 AND what = 'parent'`,
      [parent],
    );
    console.log(
      `fan-out: ${CHILDREN} children on ${owners.size} nodes, their step ran ${steps?.ran} ` +
        `times, the parent ran ${runs?.n} times and was woken ${wakes?.n} time(s)`,
    );
    expect(owners.size).toBeGreaterThan(1);
    expect(Number(wakes?.n)).toBe(1);
    // Its first run and the wake-up, plus a restart for each of the two kills that caught it
    // running (while it started its children).
    expect(Number(runs?.n)).toBeGreaterThanOrEqual(2);
    expect(Number(runs?.n)).toBeLessThanOrEqual(4);
  }, 240_000);

  it('canceling a parent cancels its children that have not ended', async () => {
    const node = nodes[nodes.length - 1] as DemoNode;
    const { episodeId: parent } = await post<{ episodeId: string }>(
      node,
      '/trigger/fanout/parent',
      { n: 30, workMs: 3_000 },
    );
    await waitFor('the parent to wait for its children', async () => {
      return (await statusOf(parent)) === 'waiting';
    });
    expect(await post(node, `/cancel/${parent}`)).toEqual({ result: 'canceled' });
    const canceledAt = Date.now();
    await waitFor(
      'every child to end',
      async () => (await childrenOf(parent)).every((c) => c.finished_at !== null),
      30_000,
      100,
    );
    expect(await statusOf(parent)).toBe('canceled');
    const children = await childrenOf(parent);
    expect(children).toHaveLength(30);
    // Their steps take 3 s: none had ended when the parent was canceled, and none ends done.
    expect(children.filter((c) => c.status !== 'canceled')).toEqual([]);
    expect(Date.now() - canceledAt).toBeLessThan(30_000);
  });
});
