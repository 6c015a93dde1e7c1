import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  post,
  sideEffects,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

/** Longer than a node's boot on a loaded machine: Y must be back within it of X's registration. */
const GRACE_MS = 12_000;

/**
 * Two services in one env, each on its own nodes: X hosts the monitor and the advisor, Y the
 * rebalancer. Y has a running episode and two queued ones when the whole cluster is killed (-9)
 * and stays down longer than `notHostedGraceMs`. X boots first: it has not watched for the grace,
 * and the time nothing was up is not "nobody hosts the rebalancer", so it fails none of Y's work
 * as `not_hosted`; Y boots next and finishes all three. (An actor hosted nowhere while a node
 * watches is still failed after the grace: recovery-not-hosted.e2e-spec.ts.)
 */
describe('not_hosted after a whole-cluster stop: the first service back does not fail another service’s work', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_NOT_HOSTED_GRACE_MS: String(GRACE_MS),
    DEMO_REBALANCER_SLOTS: '1',
  };
  const services = {
    x: { ...env, DEMO_ACTORS: 'resource_monitor,resource_advisor' },
    y: { ...env, DEMO_ACTORS: 'resource_rebalancer' },
  };
  const nodes: DemoNode[] = [];
  const boot = async (id: 'svc-x' | 'svc-y') => {
    const node = await startNode(database.url, id, id === 'svc-x' ? services.x : services.y);
    nodes.push(node);
    return node;
  };
  let y: DemoNode;

  beforeAll(async () => {
    [, y] = await Promise.all([boot('svc-x'), boot('svc-y')]);
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const once = { plan: 1, drain: 1, move: 1, verify: 1, report: 1 };
  const query = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows;

  it("keeps Y's running and queued work through the stop and X's boot; Y finishes it when it is back", async () => {
    type Answer = { status: string; episodeId: string };
    const path = '/actors/resource_rebalancer/rebalance';
    const rebalance = (resource: string, stepMs: number) =>
      post<Answer>(y, path, { payload: { resource, stepMs } });
    const started = [await rebalance('nh-running', 500)];
    for (const resource of ['nh-queued-1', 'nh-queued-2'])
      started.push(await rebalance(resource, 20));
    expect(started.map((s) => s.status)).toEqual(['started', 'queued', 'queued']);
    const ids = started.map((s) => s.episodeId);

    await Promise.all(nodes.splice(0).map((node) => node.stop('SIGKILL')));
    const down = `SELECT 1 FROM cyclium_nodes HAVING max(last_seen_at) < now() - make_interval(secs => $1)`;
    const grace = (GRACE_MS + 500) / 1000;
    await waitFor(
      'the whole cluster to be down longer than the grace (database clock)',
      async () => (await query(down, [grace])).length === 1,
      GRACE_MS + 10_000,
      200,
    );

    const x = boot('svc-x');
    // Y follows as soon as X is registered (X's first sweep comes settleMs after its boot).
    const registered = `SELECT 1 FROM cyclium_nodes
                         WHERE node_identity = 'svc-x' AND last_seen_at > now() - interval '2 seconds'`;
    await waitFor('X to register', async () => (await query(registered)).length === 1, 30_000);
    await Promise.all([x, boot('svc-y')]);
    const failed = `SELECT id, error_class, finished_at FROM cyclium_episodes
                     WHERE id = ANY($1::uuid[]) AND status = 'failed'`;
    expect(await query(failed, [ids])).toEqual([]);

    for (const id of ids) await waitForStatus(database.db, id, 'done', 30_000);
    for (const id of ids.slice(1)) expect(await sideEffects(database.db, id)).toEqual(once);
    const markers = `SELECT 1 FROM cyclium_episode_steps WHERE episode_id = ANY($1::uuid[]) AND name = 'not_hosted'`;
    expect(await query(markers, [ids])).toEqual([]);
  }, 180_000);
});
