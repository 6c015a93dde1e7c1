import { createRequire } from 'node:module';
import { join } from 'node:path';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { settleIdleStats, settleStats } from '../support/counters.js';
import { WARM_UP, printTable } from '../support/measure.js';
import {
  mark,
  walPosition,
  writesBetween,
  type RelationWrites,
  type WriteMark,
  type Writes,
} from '../support/write-counters.js';
import { bootNode, runMany } from './episodes.bench.js';

/** Episodes (or jobs) per measured window, one at a time: what a first benchmark does. */
const UNITS = 1_000;

/**
 * `npm run bench -- writes`: what one 1-step episode, one 5-step episode and one lease renewal
 * write (heap tuples by kind, index entries, row locks, WAL records and bytes, and which relation
 * took them), one at a time, next to graphile-worker's one job (added, then
 * run to its end, then the next) when PEERS_BENCH_DIR names a set-up copy of the side-by-side
 * bench, whose node_modules hold graphile-worker. Each system gets a database of its own on the
 * same server; the WAL is the server's, so nothing else runs in the window.
 */
export async function writesBench(url: string): Promise<void> {
  const units: Array<[string, Writes]> = [
    ['cyclium 1-step episode', await cycliumWrites(url, 'k1')],
    ['cyclium 5-step episode', await cycliumWrites(url, 'k5')],
    ['cyclium claim renewal', await renewalWrites(url)],
  ];
  const peers = process.env.PEERS_BENCH_DIR;
  if (peers) units.push(['graphile-worker job', await graphileWrites(url, peers)]);
  printTable(
    `Writes per unit, ${UNITS} units one at a time`,
    units.map(([label, w]) => row(label, w)),
  );
  const perUnit = (rows: RelationWrites[]) =>
    rows.map((r) => ({
      relation: r.relation,
      records: r.records.toFixed(2),
      bytes: Math.round(r.bytes),
    }));
  for (const [label, w] of units) {
    if (w.relations.length === 0) continue;
    printTable(`${label}: heap and btree records per relation`, perUnit(w.relations));
    // Every record carries a header and block references: the count is the lever, not the rows.
    printTable(`${label}: WAL records per type (bytes with headers)`, perUnit(w.kinds));
  }
  if (!peers) process.stdout.write('graphile-worker: set PEERS_BENCH_DIR to measure it too\n');
}

/** A writer the bench measures: `run(n)` writes n units and returns once they are committed. */
interface Writer {
  run(units: number): Promise<void>;
  /** Ends the writer's connections, whose backends flush their statistics as they exit. */
  close(): Promise<void>;
}

/**
 * What `writer` writes per unit over UNITS units, after WARM_UP of them. Backends that stay
 * connected flush the warm-up's statistics only once idle 10 s, so the window opens after that;
 * it closes at the last unit's WAL position and is read once the writer's backends are gone.
 */
async function unitWrites(url: string, writer: Writer): Promise<Writes> {
  let walEnd: string;
  let before: WriteMark;
  try {
    await writer.run(WARM_UP);
    await settleIdleStats();
    before = await mark(url);
    await writer.run(UNITS);
    walEnd = await walPosition(url);
  } finally {
    await writer.close();
  }
  await settleStats();
  return writesBetween(url, before, await mark(url), UNITS, walEnd);
}

async function cycliumWrites(url: string, line: 'k1' | 'k5'): Promise<Writes> {
  const app = await bootNode(url, { nodeIdentity: `writes-${line}` });
  return unitWrites(url, { run: (n) => runMany(app, line, n, 1), close: () => app.close() });
}

/** Claims held at once while their leases are renewed, as a node renews its running episodes'. */
const HELD = 100;

/**
 * What renewing one held lease writes, among `HELD` held claims and as many finished ones: the
 * renewer's statement, in rounds over the held claims, on the adapter alone (no node's chores).
 */
async function renewalWrites(url: string): Promise<Writes> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  const claims = new PostgresClaims(client);
  const held: Array<{ key: string; fence: number }> = [];
  try {
    for (let i = 0; i < 2 * HELD; i++) {
      const key = `renewals:${i}`;
      const taken = await claims.acquire(key, 'writes', { leaseSeconds: 60 });
      if (taken.status !== 'acquired') throw new Error(`writes bench: ${key} was ${taken.status}`);
      if (i % 2 === 0) held.push({ key, fence: taken.claim.fence });
      else await claims.complete(key, 'writes', taken.claim.fence);
    }
  } catch (error) {
    await client.end();
    throw error;
  }
  return unitWrites(url, {
    run: async (n) => {
      for (let r = 0; r < n / HELD; r++) {
        const renewed = await claims.renewMany('writes', held, 60);
        if (renewed.length !== held.length) throw new Error('writes bench: a renewal was refused');
      }
    },
    close: () => client.end(),
  });
}

interface GraphileRunner {
  stop(): Promise<void>;
  addJob(identifier: string, payload: unknown): Promise<unknown>;
  events: { on(event: string, listener: () => void): void };
}

interface Graphile {
  run(options: Record<string, unknown>): Promise<GraphileRunner>;
  runMigrations(options: Record<string, unknown>): Promise<void>;
  Logger: new (factory: () => () => void) => unknown;
}

async function graphileWrites(serverUrl: string, peersDir: string): Promise<Writes> {
  const gw = createRequire(join(peersDir, 'package.json'))('graphile-worker') as Graphile;
  const url = await freshDatabase(serverUrl, 'writes_graphile');
  const logger = new gw.Logger(() => () => undefined);
  await gw.runMigrations({ connectionString: url, logger });
  let done = 0;
  const runner = await gw.run({
    connectionString: url,
    concurrency: 1,
    noHandleSignals: true,
    logger,
    crontab: '',
    taskList: { t: async () => undefined },
  });
  runner.events.on('job:complete', () => done++);
  return unitWrites(url, {
    run: async (n) => {
      for (let i = 0; i < n; i++) {
        const target = done + 1;
        await runner.addJob('t', { i });
        await until(() => done >= target);
      }
      // Completions are committed after job:complete fires: wait until the table is empty.
      await until(async () => (await countJobs(url)) === 0);
    },
    close: () => runner.stop(),
  });
}

async function countJobs(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM graphile_worker._private_jobs',
    );
    return rows[0]!.n;
  } finally {
    await client.end();
  }
}

async function freshDatabase(serverUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function until(condition: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = performance.now() + 30_000;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error('writes bench: no progress for 30 s');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function row(label: string, w: Writes): Record<string, string | number> {
  const f = (n: number | null) => (n === null ? 'n/a' : n.toFixed(2));
  const heap = w.inserted + w.hotUpdated + w.coldUpdated + w.deleted;
  return {
    unit: label,
    'heap ins': f(w.inserted),
    'upd HOT': f(w.hotUpdated),
    'upd cold': f(w.coldUpdated),
    del: f(w.deleted),
    'index entries': f(w.indexEntries),
    'heap+index': w.indexEntries === null ? 'n/a' : f(heap + w.indexEntries),
    locks: f(w.locks),
    'WAL records': f(w.walRecords),
    'WAL bytes': Math.round(w.walBytes),
    'WAL bytes no FPI': w.walBytesNoFpi === null ? 'n/a' : Math.round(w.walBytesNoFpi),
  };
}
