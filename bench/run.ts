/**
 * `npm run bench -- <name>`: runs one benchmark (or all) against one database in one run, so
 * every figure is printed next to a floor measured on the same server a moment earlier.
 */
import { arrivalsBench } from './benchmarks/arrivals.bench.js';
import { busBench } from './benchmarks/bus.bench.js';
import { claimsBench } from './benchmarks/claims.bench.js';
import { dispatchBench } from './benchmarks/dispatch.bench.js';
import { dueBench } from './benchmarks/due.bench.js';
import { e2eBench } from './benchmarks/e2e.bench.js';
import {
  episodesBench,
  flowBench,
  versionsBench,
  integrityBench,
  transactionsBench,
} from './benchmarks/episodes.bench.js';
import { floorBench } from './benchmarks/floor.bench.js';
import { historyBench } from './benchmarks/history.bench.js';
import { limitBench } from './benchmarks/limit.bench.js';
import { notifyBench } from './benchmarks/notify.bench.js';
import { scaleBench } from './benchmarks/scale.bench.js';
import { takeoverBench } from './benchmarks/takeover.bench.js';
import { waitsBench } from './benchmarks/waits.bench.js';
import { writesBench } from './benchmarks/writes.bench.js';
import { openBenchDatabase } from './support/bench-database.js';
import { registerBenchMetrics } from './support/bench-metrics.js';

const benchmarks: Record<string, (url: string) => Promise<void>> = {
  floor: floorBench,
  claims: claimsBench,
  episodes: episodesBench,
  flow: flowBench,
  versions: versionsBench,
  integrity: integrityBench,
  transactions: transactionsBench,
  bus: busBench,
  e2e: e2eBench,
  scale: scaleBench,
  dispatch: dispatchBench,
  due: dueBench,
  takeover: takeoverBench,
  arrivals: arrivalsBench,
  history: historyBench,
  waits: waitsBench,
  writes: writesBench,
  limit: limitBench,
  notify: notifyBench,
};

async function main(): Promise<void> {
  const requested = process.argv.slice(2).filter((arg) => !arg.startsWith('-'));
  const unknown = requested.filter((name) => !(name in benchmarks));
  if (unknown.length > 0) {
    throw new Error(
      `unknown benchmark ${unknown.join(', ')}; available: ${Object.keys(benchmarks).join(', ')}`,
    );
  }
  const names = requested.length > 0 ? requested : Object.keys(benchmarks);
  const metrics = process.env.BENCH_OTEL === '1' ? registerBenchMetrics() : null;
  if (metrics)
    process.stdout.write(
      'BENCH_OTEL=1: an OpenTelemetry MeterProvider is registered, every Cyclium instrument is fed\n',
    );
  const database = await openBenchDatabase();
  try {
    for (const name of names) await benchmarks[name](database.url);
  } finally {
    await database.close();
    await metrics?.shutdown();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
