/**
 * One seed from start to verdict: generate its schedule, run it on a database of its own, read
 * the history back and check it. The result carries the replay command and, per fault kind, how
 * many faults were injected.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readHistory } from './checker/audit-reader.js';
import { checkRun } from './checker/fault-schedule-checker.js';
import { formatReport } from './checker/violation-report.js';
import type { PostgresServer } from './cluster/postgres-server.js';
import { ConfigRefusedError, ScheduleRunner } from './cluster/schedule-runner.js';
import { generateSchedule } from './schedule/schedule-generator.js';
import type { ScheduleParameters } from './schedule/schedule.js';
import type { SeedResult } from './seed-result.js';

/** The command that replays `seed` with these parameters. */
export function replayCommand(seed: number, params: ScheduleParameters): string {
  const parts = ['npm run soak --', `--seed ${seed}`, `--duration-ms ${params.durationMs}`];
  if (params.processes !== undefined) parts.push(`--processes ${params.processes ? 'on' : 'off'}`);
  else parts.push(`--processes-share ${params.processesShare}`);
  if (params.claims !== undefined) parts.push(`--claims ${params.claims ? 'on' : 'off'}`);
  if (!params.databaseRestarts) parts.push('(DATABASE_URL set: no database restarts)');
  return parts.join(' ');
}

export async function runSeed(
  seed: number,
  params: ScheduleParameters,
  server: PostgresServer,
  outputRoot: string,
  quiesceTimeoutMs: number,
): Promise<SeedResult> {
  const began = Date.now();
  const schedule = generateSchedule(seed, params);
  const outputDir = join(outputRoot, `seed-${seed}`);
  await mkdir(outputDir, { recursive: true });
  await writeFile(join(outputDir, 'schedule.json'), JSON.stringify(schedule, null, 1));
  const nodeLog = createWriteStream(join(outputDir, 'nodes.log'));
  nodeLog.on('error', () => undefined);
  const databaseUrl = await server.databaseFor(seed);
  const { setup } = schedule;
  const replay = replayCommand(seed, params);
  const result: SeedResult = {
    seed,
    processes: setup.processes,
    claims: setup.claims,
    layout: setup.layout,
    outsider: setup.outsider,
    shortWindows: setup.windows !== null,
    wallMs: 0,
    quiesced: false,
    faults: {},
    clusterStops: 0,
    workSent: 0,
    episodes: 0,
    violations: [],
    replay,
    outputDir,
  };
  try {
    const runner = new ScheduleRunner(schedule, server, databaseUrl, nodeLog);
    let log;
    try {
      log = await runner.run({ bootTimeoutMs: 60_000, quiesceTimeoutMs });
    } catch (error) {
      if (error instanceof ConfigRefusedError)
        return { ...result, refused: error.message, wallMs: Date.now() - began };
      throw error;
    }
    const history = await readHistory(databaseUrl);
    const violations = checkRun(log, history);
    for (const fault of log.faults)
      result.faults[fault.kind] = (result.faults[fault.kind] ?? 0) + 1;
    result.clusterStops = result.faults.cluster_stop ?? 0;
    result.workSent = log.work.filter((w) => w.nodeId !== null).length;
    result.episodes = history.episodes.size;
    result.quiesced = log.quiesced;
    result.violations = violations;
    result.wallMs = Date.now() - began;
    await writeFile(join(outputDir, 'run-log.json'), JSON.stringify(log, null, 1));
    await writeFile(join(outputDir, 'report.txt'), formatReport(result, history, log));
    if (violations.length > 0) {
      // The whole history, for a diagnosis after the database is gone.
      const dump = {
        ...history,
        episodes: [...history.episodes.values()],
        events: [...history.events.values()],
      };
      await writeFile(join(outputDir, 'history.json'), JSON.stringify(dump));
    }
    return result;
  } finally {
    await new Promise<void>((resolve) => nodeLog.end(resolve));
    if (result.violations.length === 0 && !result.refused)
      await server.dropDatabase(databaseUrl).catch(() => undefined);
  }
}
