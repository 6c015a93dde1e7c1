/**
 * The demo registers the OpenTelemetry SDK with the Prometheus exporter: each node's `/metrics`
 * counts what that node did, the claims, steals and episodes this test produced.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  post,
  rebalanceOn,
  startNode,
  stepsJournaled,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

// The advisor's timer would start episodes (and take claims) of its own while the test counts.
const ENV = { ...FAST_RECOVERY, DEMO_ADVISOR_EVERY: '1h' };

async function scrape(node: DemoNode): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${node.port}/metrics`);
  if (!response.ok) throw new Error(`GET /metrics → ${response.status}`);
  return response.text();
}

/** The sum of a metric's samples whose labels include `labels` (0 when none). */
function sample(text: string, metric: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!match || match[1] !== metric) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([name, value]) => found[name] === value))
      sum += Number(match[3]);
  }
  return sum;
}

/** What `node` counted since `before` was scraped. */
async function since(
  node: DemoNode,
  before: string,
  metric: string,
  labels: Record<string, string> = {},
): Promise<number> {
  return sample(await scrape(node), metric, labels) - sample(before, metric, labels);
}

const REBALANCER = { cyclium_actor: 'resource_rebalancer', cyclium_expectation: 'rebalance' };

describe('metrics: /metrics on demo nodes', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(['node-a', 'node-b'].map((id) => startNode(database.url, id, ENV)))),
    );
  });

  afterAll(async () => {
    for (const node of nodes) node.process.kill('SIGCONT');
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('counts the claims, episodes and steps a node ran, and none of them on its peer', async () => {
    const [a, b] = nodes;
    const [beforeA, beforeB] = await Promise.all([scrape(a), scrape(b)]);
    const ids = await Promise.all(
      [1, 2, 3].map((n) => rebalanceOn(a, { resource: `metered-${n}`, stepMs: 10 })),
    );
    await Promise.all(ids.map((id) => waitForStatus(database.db, id, 'done')));

    // The terminal event is emitted once the end committed: give the scrape a moment to see the last one.
    await waitFor(
      'node-a to count three ended episodes',
      async () => (await since(a, beforeA, 'cyclium_episodes_ended_total', REBALANCER)) === 3,
    );
    const text = await scrape(a);
    const counted = (metric: string, labels: Record<string, string> = {}) =>
      sample(text, metric, labels) - sample(beforeA, metric, labels);
    expect(counted('cyclium_claims_total', { cyclium_claim_outcome: 'acquired' })).toBe(3);
    expect(counted('cyclium_claims_total', { cyclium_claim_outcome: 'completed' })).toBe(3);
    expect(counted('cyclium_claims_total', { cyclium_claim_outcome: 'steal' })).toBe(0);
    expect(
      counted('cyclium_episodes_started_total', {
        ...REBALANCER,
        cyclium_episode_resumed: 'false',
      }),
    ).toBe(3);
    expect(
      counted('cyclium_episodes_ended_total', { ...REBALANCER, cyclium_episode_status: 'done' }),
    ).toBe(3);
    expect(counted('cyclium_episode_step_duration_count', REBALANCER)).toBe(15);
    expect(
      counted('cyclium_episode_duration_count', { ...REBALANCER, cyclium_episode_status: 'done' }),
    ).toBe(3);
    expect(
      counted('cyclium_claim_acquire_duration_count', { cyclium_claim_outcome: 'acquired' }),
    ).toBe(3);
    // Per node, from its memory: nothing runs now, and the gauge says which node it is.
    expect(
      sample(text, 'cyclium_episodes_running', {
        cyclium_node: 'node-a',
        cyclium_actor: 'resource_rebalancer',
      }),
    ).toBe(0);
    expect(text).toMatch(/^cyclium_claims_live\{[^}]*cyclium_node="node-a"[^}]*\} 0/m);
    // No attribute carries an id.
    for (const id of ids) expect(text).not.toContain(id);

    expect(
      await since(b, beforeB, 'cyclium_claims_total', { cyclium_claim_outcome: 'acquired' }),
    ).toBe(0);
    expect(await since(b, beforeB, 'cyclium_episodes_ended_total', REBALANCER)).toBe(0);
  });

  it('times a bus event to the episode it triggered, on the node that ran it, and counts the event published and read', async () => {
    const [a, b] = nodes;
    const [beforeA, beforeB] = await Promise.all([scrape(a), scrape(b)]);
    const latency = {
      cyclium_actor: 'resource_rebalancer',
      cyclium_event_type: 'resource.rebalance',
    };
    await post(a, '/events', {
      type: 'resource.rebalance',
      payload: { resource: 'metered-event', stepMs: 10 },
    });
    await waitFor(
      'one node to time the event to its episode',
      async () =>
        (await since(a, beforeA, 'cyclium_episode_trigger_latency_count', latency)) +
          (await since(b, beforeB, 'cyclium_episode_trigger_latency_count', latency)) ===
        1,
    );
    expect(await since(a, beforeA, 'cyclium_bus_published_total')).toBeGreaterThanOrEqual(1);
    await waitFor(
      'both nodes to count the event read',
      async () =>
        (await since(a, beforeA, 'cyclium_bus_read_total')) >= 1 &&
        (await since(b, beforeB, 'cyclium_bus_read_total')) >= 1,
    );
  });

  it('counts a steal from a SIGSTOP-ed holder on the node that took the claim over', async () => {
    const [holder, stealer] = nodes;
    // An episode of an earlier test still ending would count on either node after this baseline.
    await waitFor('no episode under way', async () => {
      const { rows } = await database.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status IN ('queued', 'running')`,
      );
      return rows[0].n === 0;
    });
    const before = await scrape(stealer);
    const id = await rebalanceOn(holder, { resource: 'metered-stolen', stepMs: 1200 });
    await waitFor(
      'the first checkpoint',
      async () => (await stepsJournaled(database.db, id)).length >= 1,
    );
    await waitFor(
      'the holder to report its live claim',
      async () =>
        sample(await scrape(holder), 'cyclium_claims_live', { cyclium_node: 'node-a' }) === 1,
    );
    holder.process.kill('SIGSTOP');
    try {
      const done = await waitForStatus(database.db, id, 'done', 30_000);
      expect(done.owner_node).toBe('node-b');
      await waitFor(
        'node-b to count the episode',
        async () =>
          (await since(stealer, before, 'cyclium_episodes_ended_total', REBALANCER)) === 1,
      );
      const text = await scrape(stealer);
      const counted = (metric: string, labels: Record<string, string> = {}) =>
        sample(text, metric, labels) - sample(before, metric, labels);
      expect(counted('cyclium_claims_total', { cyclium_claim_outcome: 'steal' })).toBe(1);
      expect(counted('cyclium_claims_total', { cyclium_claim_outcome: 'acquired' })).toBe(0);
      expect(counted('cyclium_recoveries_total', { cyclium_recovery_outcome: 'restarted' })).toBe(
        1,
      );
      expect(
        counted('cyclium_episodes_started_total', {
          ...REBALANCER,
          cyclium_episode_resumed: 'true',
        }),
      ).toBe(1);
      expect(
        counted('cyclium_episodes_ended_total', { ...REBALANCER, cyclium_episode_status: 'done' }),
      ).toBe(1);
    } finally {
      holder.process.kill('SIGCONT');
    }
  }, 120_000);
});
