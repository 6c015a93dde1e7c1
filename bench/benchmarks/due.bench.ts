import { freePort } from '@cyclium/nestjs/testing';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import { statementSource } from '../support/counters.js';
import { printTable } from '../support/measure.js';

const DEMO_MAIN = fileURLToPath(new URL('../../../apps/demo/dist/main.js', import.meta.url));
const NODES = 3;
const SLOTS = 5;
const POLL_MS = 5_000;
/** One 10 ms step: the episodes take milliseconds, so the drain shows what the dispatch path costs. */
const PAYLOAD = { stepMs: 10, steps: 1 };
/** Triggers in flight while the backlog is written. */
const WRITERS = 24;
/** The target: every run starts within this of its due time. */
const TARGET_MS = 20_000;

interface Node {
  child: ChildProcess;
  port: number;
}

async function startNode(url: string, id: string): Promise<Node> {
  const port = await freePort();
  const child = spawn(process.execPath, [DEMO_MAIN], {
    env: {
      ...process.env,
      DATABASE_URL: url,
      PORT: String(port),
      CYCLIUM_NODE_ID: id,
      NO_COLOR: '1',
      LOG_LEVEL: 'warn',
      DEMO_REBALANCER_SLOTS: String(SLOTS),
      DEMO_TRIGGER_POLL_MS: String(POLL_MS),
      DEMO_DB_POOL: '8',
    },
    stdio: 'ignore',
  });
  const deadline = Date.now() + 60_000;
  while (
    !(await fetch(`http://127.0.0.1:${port}/health`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline || child.exitCode !== null)
      throw new Error(`node ${id} did not come up`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, port };
}

/** How late each run started against its due time, by the database clock. */
const LATENESS = `
  WITH late AS (
    SELECT extract(epoch FROM e.started_at - r.not_before) * 1000 AS ms
      FROM cyclium_episodes e JOIN cyclium_trigger_requests r ON r.episode_id = e.id)
  SELECT min(ms)::float8 AS min, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8 AS p50,
         percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::float8 AS p90,
         percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::float8 AS p99, max(ms)::float8 AS max
    FROM late`;
const PER_NODE = `
  SELECT owner_node AS node, count(*)::int AS runs FROM cyclium_episodes
   WHERE actor_id = 'resource_rebalancer' GROUP BY owner_node ORDER BY owner_node`;
const DONE = `SELECT count(*)::int AS n FROM cyclium_episodes
               WHERE actor_id = 'resource_rebalancer' AND status = 'done'`;
/**
 * The pollers' reads of due requests ($1), and their takes ($2): one per start tried, a lost one
 * affecting no row; and every statement any node ran meanwhile (the runs, beats and sweeps included).
 */
const POLLER_WORK = `
  SELECT coalesce(sum(calls) FILTER (WHERE query LIKE $1), 0)::int AS polls,
         coalesce(sum(calls) FILTER (WHERE query LIKE $2), 0)::int AS takes,
         coalesce(sum(rows) FILTER (WHERE query LIKE $2), 0)::int AS taken,
         sum(calls)::int AS statements
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`;
const POLL_TEXT =
  'SELECT * FROM cyclium_trigger_requests%ORDER BY coalesce(not_before, inserted_at), id%';
const TAKE_TEXT = 'UPDATE cyclium_trigger_requests SET status = %claimed_by%';

async function trigger(node: Node, body: unknown): Promise<void> {
  const response = await fetch(
    `http://127.0.0.1:${node.port}/actors/resource_rebalancer/rebalance`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    },
  );
  const answer = (await response.json()) as { status?: string };
  if (answer.status !== 'deferred')
    throw new Error(`a run for later was ${JSON.stringify(answer)}`);
}

/**
 * A backlog of due work: `BENCH_DUE_RUNS` (2,000) runs for later, all due at the same instant, on
 * three demo nodes (real processes) with five slots each, a 5 s poll interval and 10 ms episodes.
 * Prints how late each started against its due time (the database clock's started_at − not_before),
 * how the starts spread over the nodes, and what the pollers did for it. Target: all within 20 s of
 * their due time (one batch of free slots per poll interval would take 2,000 / 15 × 5 s, about 11
 * minutes).
 */
export async function dueBench(url: string): Promise<void> {
  const runs = Number(process.env.BENCH_DUE_RUNS ?? 2_000);
  await migrateDemoDatabase(url);
  const db = new pg.Pool({ connectionString: url, max: 2 });
  db.on('error', () => undefined);
  const nodes = await Promise.all(
    Array.from({ length: NODES }, (_, i) => startNode(url, `due-${i + 1}`)),
  );
  try {
    const counted = (await statementSource(url)) === 'pg_stat_statements';
    const leadMs = await writeBacklog(db, nodes, runs);
    if (counted) await db.query('SELECT pg_stat_statements_reset()');
    const deadline = Date.now() + leadMs + 15 * 60_000;
    for (;;) {
      const done = (await db.query<{ n: number }>(DONE)).rows[0].n;
      if (done >= runs) break;
      if (Date.now() > deadline)
        throw new Error(`only ${done} of ${runs} done after 15 minutes past due`);
      await new Promise((r) => setTimeout(r, 250));
    }
    const late = (await db.query<Record<'min' | 'p50' | 'p90' | 'p99' | 'max', number>>(LATENESS))
      .rows[0];
    const ms = Object.fromEntries(
      Object.entries(late).map(([name, value]) => [name, Math.round(value)]),
    );
    const met = late.max < TARGET_MS ? 'yes' : 'NO';
    const shape = `${NODES} nodes × ${SLOTS} slots, poll every ${POLL_MS} ms, 10 ms episodes`;
    const title = `due: ${runs} runs due at one instant, ${shape}`;
    printTable(title, [{ measure: 'start − due (ms)', ...ms, target: `max < ${TARGET_MS}`, met }]);
    printTable(
      'due: runs per node',
      (await db.query<{ node: string; runs: number }>(PER_NODE)).rows,
    );
    if (counted) {
      type Work = { polls: number; takes: number; taken: number; statements: number };
      const { polls, takes, taken, statements } = (
        await db.query<Work>(POLLER_WORK, [POLL_TEXT, TAKE_TEXT])
      ).rows[0];
      const perRun = (statements / runs).toFixed(1);
      const work = {
        polls,
        'takes tried': takes,
        'takes lost': takes - taken,
        runs,
        'statements/run (all)': perRun,
      };
      printTable("due: the pollers' work for the drain", [work]);
      // Where a run's statements go: the profile to cut them from (the takes, the claims, the bus reads).
      const top = await db.query<{ calls: number; query: string }>(
        `SELECT calls::int, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC LIMIT 16`,
      );
      printTable('due: the statements of the drain, most called first', top.rows);
    }
  } finally {
    for (const node of nodes) node.child.kill('SIGKILL');
    await db.end();
  }
}

/** Writes `runs` runs for later through the nodes' HTTP API, all due at one instant; returns how far ahead that was. */
async function writeBacklog(db: pg.Pool, nodes: Node[], runs: number): Promise<number> {
  // Due once every trigger is written: they go in at about 100 a second here, with room to spare.
  const leadMs = 10_000 + runs * 15;
  const { rows } = await db.query<{ at: Date }>(`SELECT now() + make_interval(secs => $1) AS at`, [
    leadMs / 1000,
  ]);
  const runAt = rows[0].at.toISOString();
  let next = 0;
  const writer = async () => {
    for (let i = next++; i < runs; i = next++) {
      await trigger(nodes[i % NODES], { payload: { resource: `due-${i}`, ...PAYLOAD }, runAt });
    }
  };
  await Promise.all(Array.from({ length: WRITERS }, writer));
  const left = `SELECT (extract(epoch FROM $1::timestamptz - now()) * 1000)::float8 AS ms`;
  const leftMs = (await db.query<{ ms: number }>(left, [runAt])).rows[0].ms;
  if (leftMs <= 0)
    throw new Error(`writing ${runs} triggers outlasted their due time by ${-leftMs} ms`);
  return leadMs;
}
