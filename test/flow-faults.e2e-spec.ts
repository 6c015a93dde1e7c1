import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const FLOW_NODE = fileURLToPath(new URL('./fixtures/dist/flow-node.js', import.meta.url));

interface Job {
  run: string;
  customer?: string;
  ms?: number;
  gate?: string;
}

interface FlowNode extends DemoNode {
  /** Its identity and process, as its audit rows name it (`<identity>#<pid>`). */
  audit: string;
  id: string;
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
 * Flow control across real node processes on one PostgreSQL (issue 44, "Done when"): concurrency
 * per key and per expectation, a rate limit, priority and fairness, with nodes `kill -9`-ed,
 * drained and the whole cluster stopped. Each run of a method is audited by the database clock
 * (test/fixtures/flow-node.ts); a run a `kill -9` cut short has no end, and ends when its node
 * died (read from the database clock once the process is gone).
 */
describe('flow control across three node processes under kill -9, drains and cluster stops', () => {
  const database = useDatabase(4);
  const started: DemoNode[] = [];
  /** The nodes up now. */
  let live: FlowNode[] = [];
  let count = 0;

  const start = async (id = `flow-${++count}`): Promise<FlowNode> => {
    const node = await startNodeProcess(FLOW_NODE, database.url, {
      env: { CYCLIUM_NODE_ID: id },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    started.push(node);
    return Object.assign(node, { id, audit: `${id}#${node.process.pid}` });
  };
  const query = async <T>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];

  /** Stops `node` with `signal`, and records when it died by the database clock. */
  const stop = async (node: FlowNode, signal: NodeJS.Signals) => {
    await node.stop(signal);
    await query(`INSERT INTO flow_deaths (node, died_at) VALUES ($1, clock_timestamp())`, [
      node.audit,
    ]);
    live = live.filter((n) => n !== node);
  };

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE flow_runs (
        id bigserial PRIMARY KEY, episode_id uuid NOT NULL, expectation text NOT NULL, run text,
        customer text, node text NOT NULL, started_at timestamptz NOT NULL,
        ended_at timestamptz, outcome text);
      CREATE TABLE flow_done (episode_id uuid NOT NULL, node text NOT NULL);
      CREATE TABLE flow_gates (name text PRIMARY KEY);
      CREATE TABLE flow_deaths (node text PRIMARY KEY, died_at timestamptz NOT NULL)`);
    live = await Promise.all([start(), start(), start()]);
  });

  afterAll(async () => {
    await Promise.all(started.map((node) => node.stop('SIGKILL')));
  });

  /** Triggers `payloads`, spread over the live nodes, each node eight at a time. */
  const spread = async (expectation: string, payloads: Job[], priority?: number) => {
    const share = Math.ceil(payloads.length / live.length);
    const parts = await Promise.all(
      live.map((node, i) =>
        post<{ episodeIds: Array<string | null> }>(node, `/trigger-many/${expectation}`, {
          payloads: payloads.slice(i * share, (i + 1) * share),
          priority,
        }),
      ),
    );
    const ids = parts.flatMap((p) => p.episodeIds);
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    return ids as string[];
  };
  const trigger = async (node: DemoNode, expectation: string, payload: Job, priority?: number) =>
    (await post<{ episodeId: string }>(node, `/trigger/${expectation}`, { payload, priority }))
      .episodeId;

  const statusCounts = async (ids: string[]) =>
    Object.fromEntries(
      (
        await query<{ status: string; n: number }>(
          `SELECT status, count(*)::int AS n FROM cyclium_episodes
            WHERE id = ANY($1::uuid[]) GROUP BY status`,
          [ids],
        )
      ).map((r) => [r.status, r.n]),
    ) as Record<string, number>;

  /**
   * The most episodes of `expectation` running at once (status running and limited) in any one
   * partition, as sampled since the last call: the database's own view, beside the audit.
   */
  let sampled = 0;
  const sample = async (expectation: string) => {
    const [row] = await query<{ n: number }>(
      `SELECT coalesce(max(n), 0)::int AS n FROM (
         SELECT count(*) AS n FROM cyclium_episodes
          WHERE status = 'running' AND flow_key IS NOT NULL AND expectation_id = $1
          GROUP BY flow_key) x`,
      [expectation],
    );
    sampled = Math.max(sampled, row!.n);
  };

  /** Waits until every one of `ids` is `done` (any other ending fails at once). */
  const allDone = async (ids: string[], timeoutMs: number, expectation?: string) => {
    let last: Record<string, number> = {};
    try {
      await waitFor(
        `${ids.length} episodes to end done`,
        async () => {
          if (expectation) await sample(expectation);
          last = await statusCounts(ids);
          const ended = ['failed', 'canceled', 'partially_failed', 'blocked'].filter(
            (s) => last[s],
          );
          if (ended.length > 0) throw new Error(`episodes ended ${ended.join(', ')}`);
          return last.done === ids.length;
        },
        timeoutMs,
        100,
      );
    } catch (error) {
      throw new Error(`${String(error)}; statuses: ${JSON.stringify(last)}`, { cause: error });
    }
  };

  /**
   * The most audited runs of `run` that overlapped at any instant (per customer when
   * `byCustomer`): starts +1, ends -1 in time order, an end before a start at the same instant.
   * An open run ends when its node died; one whose node still lives counts as never ending.
   */
  const peak = async (run: string, byCustomer = false) => {
    const [row] = await query<{ n: number }>(
      `WITH runs AS (
         SELECT r.customer, r.started_at AS s,
                coalesce(r.ended_at, d.died_at, 'infinity') AS e
           FROM flow_runs r LEFT JOIN flow_deaths d ON d.node = r.node
          WHERE r.run = $1),
       moves AS (
         SELECT customer, s AS at, 1 AS delta FROM runs
         UNION ALL SELECT customer, e, -1 FROM runs)
       SELECT coalesce(max(n), 0)::int AS n FROM (
         SELECT sum(delta) OVER (PARTITION BY ${byCustomer ? 'customer' : '1'}
                                 ORDER BY at, delta ROWS UNBOUNDED PRECEDING) AS n
           FROM moves) x`,
      [run],
    );
    return row!.n;
  };

  /**
   * Each episode of `run` completed once (one `flow_done` row, written by `ep.transaction`), its
   * runs never overlapped, and a run that did not end `done` was cut short by its node's end.
   */
  const ranOnce = async (run: string, ids: string[]) => {
    const done = await query<{ episode_id: string; n: number }>(
      `SELECT episode_id, count(*)::int AS n FROM flow_done
        WHERE episode_id = ANY($1::uuid[]) GROUP BY episode_id`,
      [ids],
    );
    expect(done).toHaveLength(ids.length);
    expect(done.filter((d) => d.n !== 1)).toEqual([]);
    const overlapping = await query(
      `WITH runs AS (
         SELECT r.id, r.episode_id, r.started_at AS s,
                coalesce(r.ended_at, d.died_at, 'infinity') AS e
           FROM flow_runs r LEFT JOIN flow_deaths d ON d.node = r.node WHERE r.run = $1)
       SELECT a.episode_id FROM runs a JOIN runs b
         ON a.episode_id = b.episode_id AND a.id < b.id AND a.s < b.e AND b.s < a.e`,
      [run],
    );
    expect(overlapping).toEqual([]);
    const cut = await query<{ node: string; outcome: string | null; dead: boolean }>(
      `SELECT r.node, r.outcome, d.node IS NOT NULL AS dead FROM flow_runs r
         LEFT JOIN flow_deaths d ON d.node = r.node
        WHERE r.run = $1 AND r.outcome IS DISTINCT FROM 'done'`,
      [run],
    );
    expect(cut.filter((c) => !c.dead)).toEqual([]);
    const [runs] = await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM flow_runs WHERE run = $1`,
      [run],
    );
    return { runs: runs!.n, cut: cut.length };
  };

  it('caps an expectation without a key at 5 running across three nodes, not 15', async () => {
    sampled = 0;
    const ids = await spread(
      'global',
      Array.from({ length: 45 }, () => ({ run: 'global', ms: 300 })),
    );
    await allDone(ids, 30_000, 'global');
    expect(await peak('global')).toBe(5);
    expect(sampled).toBeLessThanOrEqual(5);
    // Not one node's ceiling: each node allows 16 and `spread` triggered from all three, so a
    // per-node cap would peak at 15. Which nodes run them is not asserted: a node whose episode
    // ends admits the next one itself, and under load one node can win every admission.
  });

  it('starts at most 20 in any 1 s window over 30 s of oversupply, and keeps up', async () => {
    // More than 30 s can start (20 at once, then 20 a second): the backlog lasts the whole time.
    const ids = await spread(
      'rated',
      Array.from({ length: 640 }, () => ({ run: 'rated' })),
    );
    await allDone(ids, 60_000);
    // By cyclium_episodes.started_at, which the admission sets by the database clock.
    const [window] = await query<{ n: number }>(
      `SELECT max((SELECT count(*) FROM cyclium_episodes b
                    WHERE b.expectation_id = 'rated' AND b.started_at >= a.started_at
                      AND b.started_at < a.started_at + interval '1 second'))::int AS n
         FROM cyclium_episodes a WHERE a.expectation_id = 'rated'`,
    );
    const [first30] = await query<{ n: number; nodes: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT owner_node)::int AS nodes FROM cyclium_episodes
        WHERE expectation_id = 'rated'
          AND started_at < (SELECT min(started_at) FROM cyclium_episodes
                             WHERE expectation_id = 'rated') + interval '30 seconds'`,
    );
    console.log(
      `rated: at most ${window!.n} starts in a 1 s window; ${first30!.n} starts in the first ` +
        `30 s (limit 600), on ${first30!.nodes} nodes`,
    );
    expect(window!.n).toBeLessThanOrEqual(20);
    expect(first30!.n).toBeGreaterThanOrEqual(0.9 * 600);
    expect(first30!.nodes).toBeGreaterThanOrEqual(2);
  }, 90_000);

  it('keeps 2 per customer, 20 in all, with a node kill -9-ed and one drained', async () => {
    sampled = 0;
    const ids = await spread(
      'per-customer',
      Array.from({ length: 300 }, (_, i) => ({ run: 'keyed', customer: `c${i % 10}`, ms: 1_000 })),
    );
    // Mid-way, while two nodes run episodes of the expectation: the one running most is killed,
    // another that runs some is drained. Which two is decided then: under load one node can win
    // most admissions for a while (CI at 183c3de waited 60 s for two fixed nodes to both run some).
    const [victim, drained] = await waitFor(
      'a third done, and two nodes running some',
      async (): Promise<[FlowNode, FlowNode]> => {
        await sample('per-customer');
        const [row] = await query<{ done: number }>(
          `SELECT count(*) FILTER (WHERE status = 'done')::int AS done
             FROM cyclium_episodes WHERE id = ANY($1::uuid[])`,
          [ids],
        );
        const running = await query<{ owner_node: string; n: number }>(
          `SELECT owner_node, count(*)::int AS n FROM cyclium_episodes
            WHERE id = ANY($1::uuid[]) AND status = 'running'
            GROUP BY owner_node ORDER BY n DESC`,
          [ids],
        );
        const busy = running
          .map((r) => live.find((node) => node.id === r.owner_node))
          .filter((node): node is FlowNode => node !== undefined);
        if (row!.done >= 100 && busy.length >= 2) return [busy[0] as FlowNode, busy[1] as FlowNode];
        // Thrown, so a timeout says how far it got.
        throw new Error(
          `${row!.done} done; running: ${running.map((r) => `${r.owner_node} ${r.n}`).join(', ')}`,
        );
      },
      60_000,
      100,
    );
    await Promise.all([stop(victim, 'SIGKILL'), stop(drained, 'SIGTERM')]);
    live.push(...(await Promise.all([start(), start()])));
    await allDone(ids, 90_000, 'per-customer');

    expect(await peak('keyed', true)).toBe(2);
    const overall = await peak('keyed');
    expect(overall).toBeLessThanOrEqual(20);
    expect(sampled).toBeLessThanOrEqual(2);
    const { runs, cut } = await ranOnce('keyed', ids);
    const [killed] = await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM flow_runs WHERE node = $1 AND ended_at IS NULL`,
      [victim.audit],
    );
    console.log(
      `keyed: ${runs} runs of 300 episodes (${cut} cut short, ${killed!.n} by the kill -9); ` +
        `at most ${overall} at once`,
    );
    // The kill cut runs short: they were restarted elsewhere, within the limits.
    expect(killed!.n).toBeGreaterThan(0);
  }, 180_000);

  it('a whole-cluster stop with 1,000 throttled rows: limits hold, each runs once', async () => {
    sampled = 0;
    // Each run holds until the gate opens: 20 run (2 for each of 10 customers), 1,000 wait.
    const ids = await spread(
      'per-customer',
      Array.from({ length: 1_020 }, (_, i) => ({
        run: 'stop',
        customer: `c${i % 10}`,
        ms: 50,
        gate: 'stop',
      })),
    );
    await waitFor(
      '20 running and 1,000 throttled',
      async () => {
        await sample('per-customer');
        const counts = await statusCounts(ids);
        return counts.running === 20 && counts.throttled === 1_000;
      },
      60_000,
      100,
    );
    const identities = live.map((n) => n.id);
    const signals: NodeJS.Signals[] = ['SIGKILL', 'SIGTERM', 'SIGKILL'];
    await Promise.all(live.map((node, i) => stop(node, signals[i] ?? 'SIGKILL')));
    expect(live).toEqual([]);
    await query(`INSERT INTO flow_gates (name) VALUES ('stop')`);
    // The same identities come back, as a restarted cluster would.
    live = await Promise.all(identities.map((id) => start(id)));
    await allDone(ids, 120_000, 'per-customer');

    expect(await peak('stop', true)).toBe(2);
    const overall = await peak('stop');
    expect(overall).toBeLessThanOrEqual(20);
    expect(sampled).toBeLessThanOrEqual(2);
    const { runs, cut } = await ranOnce('stop', ids);
    console.log(`stop: ${runs} runs of ${ids.length} episodes (${cut} cut short by the stop)`);
    // The 20 that ran when the cluster stopped ran again; the 1,000 that waited ran once.
    expect(cut).toBe(20);
    expect(runs).toBe(ids.length + 20);
  }, 240_000);

  it('a priority-10 trigger starts before a backlog of 500; B before 20 more of A', async () => {
    // Priority: the one running holds until the gate opens; 500 wait behind it.
    const [one, two, three] = live as [FlowNode, FlowNode, FlowNode];
    const blocker = await trigger(one, 'prio', { run: 'prio', ms: 0, gate: 'prio' });
    await waitFor('the blocker to run', async () => {
      const [row] = await query<{ status: string }>(
        `SELECT status FROM cyclium_episodes WHERE id = $1`,
        [blocker],
      );
      return row?.status === 'running';
    });
    const backlog = await spread(
      'prio',
      Array.from({ length: 500 }, () => ({ run: 'prio', ms: 0 })),
    );
    const urgent = await trigger(two, 'prio', { run: 'prio', ms: 0 }, 10);
    expect(await statusCounts([...backlog, urgent])).toEqual({ throttled: 501 });
    await query(`INSERT INTO flow_gates (name) VALUES ('prio')`);
    await allDone([blocker, urgent], 30_000);
    const order = await query<{ id: string }>(
      `SELECT id FROM cyclium_episodes WHERE expectation_id = 'prio' AND started_at IS NOT NULL
        ORDER BY started_at, id LIMIT 2`,
    );
    expect(order.map((r) => r.id)).toEqual([blocker, urgent]);
    // The backlog goes on draining, one at a time, while fairness is measured.

    // Fairness: A's 2,000, then B's 10; limit 2 per customer, 4 in all.
    await spread(
      'fair',
      Array.from({ length: 2_000 }, () => ({ run: 'fair', customer: 'A', ms: 100 })),
    );
    const [before] = await query<{ at: Date; waiting: number }>(
      `SELECT clock_timestamp() AS at, count(*)::int AS waiting FROM cyclium_episodes
        WHERE expectation_id = 'fair' AND status = 'throttled'`,
    );
    // A's burst still waits: B has to get through it.
    expect(before!.waiting).toBeGreaterThan(1_000);
    const b = (
      await post<{ episodeIds: string[] }>(three, '/trigger-many/fair', {
        payloads: Array.from({ length: 10 }, () => ({ run: 'fair', customer: 'B', ms: 100 })),
      })
    ).episodeIds;
    await allDone(b, 30_000);
    const [a] = await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_episodes
        WHERE expectation_id = 'fair' AND flow_key = 'A' AND started_at >= $1
          AND started_at < (SELECT max(started_at) FROM cyclium_episodes
                             WHERE id = ANY($2::uuid[]))`,
      [before!.at, b],
    );
    console.log(`fair: ${a!.n} of A's started between B's trigger and B's last start`);
    expect(a!.n).toBeLessThan(20);
    expect(await peak('fair', true)).toBeLessThanOrEqual(2);
    expect(await peak('fair')).toBeLessThanOrEqual(4);
    expect(await peak('prio')).toBe(1);
    // What is left of A's burst and the backlog is left to the nodes' SIGKILL in afterAll.
  }, 90_000);
});
