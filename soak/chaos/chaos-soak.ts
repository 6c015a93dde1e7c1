/**
 * The chaos soak (`npm run soak -- --chaos --minutes 5`): demo nodes as real processes under a
 * steady stream of events, the database restarted about every 30 s and a node killed (kill -9)
 * about every 20 s, each database stop also killing a node so its replacement boots while the
 * database is down. It counts every node exit and whether a fault asked for it, then brings the
 * cluster back, waits for it to go quiet and gives the checker's verdict.
 */
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import { readHistory } from '../checker/audit-reader.js';
import type { PostgresServer } from '../cluster/postgres-server.js';
import { waitForQuiet } from '../cluster/quiescence.js';
import { SeededRandom } from '../schedule/seeded-random.js';
import { checkChaos } from './chaos-checker.js';
import { ChaosLoad } from './chaos-load.js';
import { ChaosNodes } from './chaos-nodes.js';

export interface ChaosOptions {
  minutes: number;
  nodes: number;
  seed: number;
  output: string;
  register: (cleanup: () => Promise<void>) => void;
}

export interface ChaosVerdict {
  passed: boolean;
  text: string;
  minutes: number;
  databaseRestarts: number;
  kills: number;
  exits: { requested: number; unrequested: number };
  unrequestedExits: string[];
  accepted: number;
  episodes: number;
  violations: string[];
  quiesced: boolean;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The chaos soak's quiet: no live episode, and no new audit row but the bus's own, for 5 s. */
const CHAOS_QUIET = {
  sql: `
    SELECT (SELECT count(*) FROM cyclium_episodes
             WHERE status IN ('queued', 'deferred', 'waiting', 'running', 'blocked'))::int AS live,
           (SELECT coalesce(max(id), 0) FROM fs_audit WHERE op = 'INSERT' AND tbl <> 'cyclium_events')::text AS moved`,
  quietMs: 5_000,
};

export async function runChaos(
  server: PostgresServer,
  options: ChaosOptions,
): Promise<ChaosVerdict> {
  if (!server.restartable)
    throw new Error('the chaos soak restarts the database: run it without DATABASE_URL');
  await mkdir(options.output, { recursive: true });
  const log = createWriteStream(join(options.output, 'chaos-nodes.log'));
  log.on('error', () => undefined);
  const url = await server.databaseFor(1_000_000 + options.seed);
  await migrateDemoDatabase(url);
  const nodes = new ChaosNodes(url, log);
  options.register(() => nodes.stopAll('SIGKILL'));
  const slots = Array.from({ length: options.nodes }, (_, i) => i);
  const rng = new SeededRandom(options.seed);
  let databaseRestarts = 0;
  let kills = 0;
  try {
    await Promise.all(slots.map((slot) => nodes.start(slot)));
    const booted = Date.now();
    while (!nodes.allAnswer(slots) && Date.now() - booted < 60_000) await sleep(200);
    const load = new ChaosLoad(nodes);
    load.start();
    const end = Date.now() + options.minutes * 60_000;
    let nextRestart = Date.now() + rng.int(25_000, 35_000);
    let nextKill = Date.now() + rng.int(15_000, 25_000);
    while (Date.now() < end) {
      await sleep(Math.min(nextRestart, nextKill, end) - Date.now());
      if (Date.now() >= end) break;
      if (Date.now() >= nextRestart) {
        databaseRestarts++;
        const downMs = rng.int(4_000, 10_000);
        await server.stop();
        // A replacement that boots while the database is down.
        await nodes.kill(rng.int(0, slots.length - 1), rng.chance(0.5));
        kills++;
        await sleep(downMs);
        await server.start();
        nextRestart = Date.now() + rng.int(25_000, 35_000);
      } else {
        await nodes.kill(rng.int(0, slots.length - 1), rng.chance(0.5));
        kills++;
        nextKill = Date.now() + rng.int(15_000, 25_000);
      }
    }
    await load.stop();
    const back = Date.now();
    while (!nodes.allAnswer(slots) && Date.now() - back < 60_000) await sleep(200);
    const quiesced = await waitForQuiet(url, 120_000, CHAOS_QUIET);
    const history = await readHistory(url);
    const violations = await checkChaos(url, history, load.accepted);
    await nodes.stopAll();
    const unrequested = nodes.exits.filter((e) => !e.requested);
    const unrequestedExits = unrequested.map(
      (e) =>
        `${e.nodeId} at ${new Date(e.at).toISOString().slice(11, 19)} ` +
        `(${e.duringBoot ? 'booting' : 'running'}, code ${e.code}): ${e.tail.slice(-2).join(' | ')}`,
    );
    const passed = unrequested.length === 0 && violations.length === 0 && quiesced;
    const text = [
      `chaos soak ${options.minutes} min, ${options.nodes} demo nodes: ${passed ? 'PASSED' : 'FAILED'}`,
      `  faults: ${databaseRestarts} database restarts, ${kills} kill -9 (each answered by a replacement)`,
      `  node exits: ${nodes.exits.length - unrequested.length} asked for by a fault, ` +
        `${unrequested.length} that no fault asked for`,
      ...unrequestedExits.map((e) => `    ${e}`),
      `  events accepted (202): ${load.accepted.length}; ` +
        `HTTP answers ${JSON.stringify(Object.fromEntries(load.statuses))}`,
      `  checker: ${history.episodes.size} episodes, quiesced ${quiesced}, ${violations.length} violation(s)`,
      ...violations.slice(0, 30).map((v) => `    ${v}`),
      `  node logs: ${join(options.output, 'chaos-nodes.log')}`,
    ].join('\n');
    return {
      passed,
      text,
      minutes: options.minutes,
      databaseRestarts,
      kills,
      exits: {
        requested: nodes.exits.length - unrequested.length,
        unrequested: unrequested.length,
      },
      unrequestedExits,
      accepted: load.accepted.length,
      episodes: history.episodes.size,
      violations,
      quiesced,
    };
  } finally {
    await nodes.stopAll('SIGKILL');
    await new Promise<void>((resolve) => log.end(resolve));
  }
}
