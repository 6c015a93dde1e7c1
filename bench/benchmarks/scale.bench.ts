import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { migrateDatabase, freePort } from '@cyclium/nestjs/testing';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import pg from 'pg';
import {
  countsSoFar,
  settleStats,
  since,
  statementSource,
  type Counts,
} from '../support/counters.js';
import { printTable } from '../support/measure.js';

const DEMO_MAIN = fileURLToPath(new URL('../../../apps/demo/dist/main.js', import.meta.url));
const NODE_COUNTS = (process.env.SCALE_NODES ?? '3,6,12').split(',').map(Number);
const EVENTS = 600;
const POSTERS = 8;
const IDLE_MS = Number(process.env.SCALE_IDLE_MS ?? 20_000);
const IDLE_ATTEMPTS = 3;
const BOOT_STATS_MS = 12_000;

/** Library defaults for everything the demo would otherwise shorten; claims on, as in the demo. */
const DEFAULTS = {
  DEMO_SETTLE_MS: '120000',
  DEMO_RECOVERY_INTERVAL_MS: '60000',
  DEMO_STALE_AFTER_MS: '120000',
  DEMO_NODE_BEAT_MS: '15000',
  DEMO_LEASE_SECONDS: '120',
  DEMO_DB_POOL: '4',
  // The demo's own once-a-minute summary is host work: left on, the idle window would count it
  // whenever it spans a minute boundary.
  DEMO_ADVISOR_EVERY: '1d',
  NO_COLOR: '1',
};

interface Node {
  port: number;
  child: ChildProcess;
}

async function startNode(url: string, id: string): Promise<Node> {
  const port = await freePort();
  const child = spawn(process.execPath, [DEMO_MAIN], {
    env: {
      ...process.env,
      ...DEFAULTS,
      DATABASE_URL: url,
      PORT: String(port),
      CYCLIUM_NODE_ID: id,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${id} exited with code ${child.exitCode}`);
    if (
      await fetch(`http://127.0.0.1:${port}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { port, child };
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${id} was not healthy in time`);
}

async function stop(nodes: Node[]): Promise<void> {
  await Promise.all(
    nodes.map(
      (node) =>
        new Promise<void>((done) => {
          if (node.child.exitCode !== null || node.child.signalCode !== null) return done();
          node.child.once('exit', () => done());
          node.child.kill('SIGTERM');
        }),
    ),
  );
}

async function freshDatabase(serverUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  await migrateDatabase(url.toString());
  await migrateDemoDatabase(url.toString());
  // Fresh tables are what autovacuum looks for first: analyzed now, they leave the idle window alone.
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  await client.query('VACUUM ANALYZE');
  await client.end();
  return url.toString();
}

async function count(url: string, sql: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return Number((await client.query(sql)).rows[0].n);
  } finally {
    await client.end();
  }
}

/** `--breakdown`: the statements behind the load's figure, per event, most called first. */
const breakdown = process.argv.includes('--breakdown');

async function callsByStatement(url: string): Promise<Map<string, number>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ query: string; calls: string }>(
      `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query, sum(calls) AS calls
         FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        GROUP BY 1`,
    );
    return new Map(rows.map((r) => [r.query, Number(r.calls)]));
  } finally {
    await client.end();
  }
}

function printBreakdown(
  title: string,
  before: Map<string, number>,
  after: Map<string, number>,
  per: number,
): void {
  const rows = [...after]
    .map(([query, calls]) => ({ query, rate: (calls - (before.get(query) ?? 0)) / per }))
    .filter((r) => r.rate >= 0.005)
    .sort((a, b) => b.rate - a.rate)
    .slice(0, 20)
    .map((r) => ({ rate: r.rate.toFixed(3), statement: r.query }));
  printTable(`scale breakdown, ${title}`, rows);
}

/**
 * Commits and statements per event as the cluster grows: 3, 6 and 12 demo node processes on one
 * database, each with the library's default timings, 600 `resource.updated` events over HTTP
 * (each one a one-step episode), then every node stopped so the listening connections report the
 * commits they owe (a listener's reads are counted when it next runs a statement or exits).
 * Before the load (and once the boot's statistics are in), the idle cost: statements and commits
 * per second per node with nothing to do.
 */
export async function scaleBench(benchUrl: string): Promise<void> {
  const rows = [];
  for (const n of NODE_COUNTS) {
    const url = await freshDatabase(benchUrl, `cyclium_scale_${n}`);
    await statementSource(url);
    const nodes: Node[] = [];
    try {
      nodes.push(
        ...(await Promise.all(
          Array.from({ length: n }, (_, i) => startNode(url, `scale-${i + 1}`)),
        )),
      );
      // A backend reports its commits when it next commits after a second, or after ten idle
      // seconds: without this wait the nodes' boot would be counted as idle cost.
      await new Promise((resolve) => setTimeout(resolve, BOOT_STATS_MS));
      // Autovacuum's transactions count as commits too (a fresh database has tables to analyze, and
      // freshDatabase's ANALYZE leaves pg_statistic to vacuum); the count is printed beside the figure.
      const autovacuumRuns = () =>
        count(url, `SELECT sum(autovacuum_count + autoanalyze_count) AS n FROM pg_stat_all_tables`);
      // The nodes' own cost is a window autovacuum stayed out of: up to three tries for one.
      let idle: Counts = { commits: 0, statements: 0 };
      let autovacuumDuringIdle = 0;
      for (let attempt = 0; attempt < IDLE_ATTEMPTS; attempt++) {
        const autovacuumBefore = await autovacuumRuns();
        const idleBefore = await countsSoFar(url);
        const idleCalls = breakdown ? await callsByStatement(url) : undefined;
        await new Promise((r) => setTimeout(r, IDLE_MS));
        idle = since(idleBefore, await countsSoFar(url));
        if (idleCalls)
          printBreakdown(
            `${n} nodes idle: statements per second per node`,
            idleCalls,
            await callsByStatement(url),
            (IDLE_MS / 1000) * n,
          );
        autovacuumDuringIdle = (await autovacuumRuns()) - autovacuumBefore;
        if (autovacuumDuringIdle === 0) break;
      }

      const before = await countsSoFar(url);
      const callsBefore = breakdown ? await callsByStatement(url) : undefined;
      let next = 0;
      await Promise.all(
        Array.from({ length: POSTERS }, async () => {
          for (let i = next++; i < EVENTS; i = next++) {
            const node = nodes[i % nodes.length] as Node;
            const response = await fetch(`http://127.0.0.1:${node.port}/events`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({
                type: 'resource.updated',
                payload: { resource: `scale-${i}`, usage: i % 100 },
              }),
            });
            if (response.status !== 202)
              throw new Error(`POST /events answered ${response.status}`);
          }
        }),
      );
      const deadline = Date.now() + 120_000;
      while (
        (await count(url, `SELECT count(*) AS n FROM cyclium_episodes WHERE status = 'done'`)) <
        EVENTS
      ) {
        if (Date.now() > deadline) throw new Error('the episodes did not finish in time');
        await new Promise((r) => setTimeout(r, 200));
      }
      await stop(nodes);
      await settleStats();
      const load: Counts = since(before, await countsSoFar(url));
      if (callsBefore)
        printBreakdown(
          `${n} nodes: statements per event`,
          callsBefore,
          await callsByStatement(url),
          EVENTS,
        );
      rows.push({
        nodes: n,
        'commits/event': (load.commits / EVENTS).toFixed(2),
        'statements/event': (load.statements / EVENTS).toFixed(2),
        'idle statements/s/node': (idle.statements / (IDLE_MS / 1000) / n).toFixed(2),
        'idle commits/s/node': (idle.commits / (IDLE_MS / 1000) / n).toFixed(2),
        'autovacuum runs while idle': autovacuumDuringIdle,
      });
    } finally {
      await stop(nodes);
    }
  }
  printTable(
    `scale: ${EVENTS} events over HTTP, each a one-step episode, library default timings; counted by ${await statementSource(benchUrl)}`,
    rows,
  );
}
