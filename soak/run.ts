/**
 * `npm run soak -- [options]`: runs fault-schedule seeds (or, with --chaos, the chaos soak) against
 * an embedded PostgreSQL of its own (or DATABASE_URL, never restarted), and prints a verdict per
 * seed and a summary. Every process it started is ended on the way out, interrupted or not.
 *
 *   --seeds N            run N seeds (from --first, default 1)
 *   --seed S[,S…]        run these seeds (a failing seed's report prints this replay)
 *   --minutes M          stop starting seeds after M minutes
 *   --duration-ms D      each schedule's length (default 20000)
 *   --processes on|off   every seed with real node processes, or none (default: --processes-share)
 *   --processes-share P  the share of seeds that run real processes (default 0.2)
 *   --claims on|off      force work claims (default: each seed decides)
 *   --quiesce-ms Q       how long the cluster may take to go quiet at the end (default 60000)
 *   --output DIR         where each seed's schedule, node logs and report go (default soak/output)
 *   --json               print the summary as one JSON object on the last line
 *   --chaos              the chaos soak instead (see chaos/chaos-soak.ts): --minutes (5), --nodes (3), --seed
 */
import { resolve } from 'node:path';
import { PostgresServer } from './cluster/postgres-server.js';
import { runChaos } from './chaos/chaos-soak.js';
import type { ScheduleParameters } from './schedule/schedule.js';
import { runSeed } from './seed-run.js';
import type { SeedResult } from './seed-result.js';

interface Args {
  seeds: number[];
  minutes: number | null;
  params: ScheduleParameters;
  quiesceMs: number;
  output: string;
  json: boolean;
  chaos: boolean;
  nodes: number;
}

function parse(argv: string[]): Args {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith('--')) throw new Error(`unexpected argument ${arg}`);
    const next = argv[i + 1];
    if (next !== undefined && !next.startsWith('--')) {
      flags.set(arg.slice(2), next);
      i++;
    } else flags.set(arg.slice(2), 'true');
  }
  const onOff = (name: string) => {
    const value = flags.get(name);
    if (value === undefined) return undefined;
    if (value !== 'on' && value !== 'off') throw new Error(`--${name} takes on or off`);
    return value === 'on';
  };
  const first = Number(flags.get('first') ?? 1);
  const seeds = flags.has('seed')
    ? (flags.get('seed') as string).split(',').map(Number)
    : Array.from(
        { length: Number(flags.get('seeds') ?? (flags.has('minutes') ? 100_000 : 10)) },
        (_, i) => first + i,
      );
  if (seeds.some((s) => !Number.isInteger(s) || s < 0))
    throw new Error('seeds are whole numbers >= 0');
  return {
    seeds,
    minutes: flags.has('minutes') ? Number(flags.get('minutes')) : null,
    params: {
      durationMs: Number(flags.get('duration-ms') ?? 20_000),
      processes: onOff('processes'),
      processesShare: Number(flags.get('processes-share') ?? 0.2),
      claims: onOff('claims'),
      databaseRestarts: !process.env.DATABASE_URL,
    },
    quiesceMs: Number(flags.get('quiesce-ms') ?? 60_000),
    output: resolve(flags.get('output') ?? 'soak/output'),
    json: flags.has('json'),
    chaos: flags.has('chaos'),
    nodes: Number(flags.get('nodes') ?? 3),
  };
}

// Nest's logger reads it (worker threads share this environment; processes inherit it).
process.env.NO_COLOR = '1';

const cleanups: Array<() => Promise<void>> = [];

async function cleanUp(): Promise<void> {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stderr.write(`\n${signal}: stopping every node and the database\n`);
    void cleanUp().finally(() => process.exit(130));
  });
}

function line(result: SeedResult): string {
  const kind = `${result.processes ? 'processes' : 'workers'}, claims ${result.claims ? 'on' : 'off'}`;
  const verdict = result.refused
    ? `refused: ${result.refused}`
    : `${result.violations.length} violation(s)`;
  const faults = JSON.stringify(result.faults);
  const took = `${Math.round(result.wallMs / 1000)} s`;
  return `seed ${result.seed} (${kind}): ${verdict}, ${result.episodes} episodes, faults ${faults}, ${took}`;
}

async function main(): Promise<void> {
  const args = parse(process.argv.slice(2));
  const server = await PostgresServer.open(process.env.DATABASE_URL);
  cleanups.push(() => server.close());
  if (args.chaos) {
    const chaos = {
      minutes: args.minutes ?? 5,
      nodes: args.nodes,
      seed: args.seeds[0] ?? 1,
      output: args.output,
    };
    const verdict = await runChaos(server, { ...chaos, register: (c) => cleanups.push(c) });
    process.stdout.write(`${args.json ? JSON.stringify(verdict) : verdict.text}\n`);
    await cleanUp();
    process.exit(verdict.passed ? 0 : 1);
  }
  const began = Date.now();
  const results: SeedResult[] = [];
  for (const seed of args.seeds) {
    if (args.minutes !== null && Date.now() - began > args.minutes * 60_000) break;
    const result = await runSeed(seed, args.params, server, args.output, args.quiesceMs);
    results.push(result);
    process.stderr.write(`${line(result)}\n`);
    for (const v of result.violations.slice(0, 8))
      process.stderr.write(`  [${v.rule}] ${v.message.slice(0, 400)}\n`);
    if (result.violations.length > 0)
      process.stderr.write(
        `  report: ${result.outputDir}/report.txt\n  replay: ${result.replay}\n`,
      );
  }
  await cleanUp();
  const failing = results.filter((r) => r.violations.length > 0);
  const faults: Record<string, number> = {};
  for (const r of results)
    for (const [kind, n] of Object.entries(r.faults)) faults[kind] = (faults[kind] ?? 0) + n;
  const summary = {
    seeds: results.length,
    withProcesses: results.filter((r) => r.processes).length,
    clusterStops: results.reduce((n, r) => n + r.clusterStops, 0),
    faults,
    failingSeeds: failing.map((r) => r.seed),
    violations: results.reduce((n, r) => n + r.violations.length, 0),
    refused: results.filter((r) => r.refused).map((r) => r.seed),
    wallMs: Date.now() - began,
    results,
  };
  const stops = `${summary.withProcesses} with processes, ${summary.clusterStops} whole-cluster stops`;
  const where = failing.length > 0 ? ` in seeds ${summary.failingSeeds.join(', ')}` : '';
  const verdict = `${summary.violations} violation(s)${where}`;
  const text = `${summary.seeds} seeds (${stops}), faults ${JSON.stringify(faults)}: ${verdict}`;
  process.stdout.write(`${args.json ? JSON.stringify(summary) : text}\n`);
  process.exit(failing.length > 0 ? 1 : 0);
}

main().catch(async (error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  await cleanUp();
  process.exit(2);
});
