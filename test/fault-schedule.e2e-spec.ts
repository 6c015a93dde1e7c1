import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * The randomized fault-schedule test (soak/, `npm run soak`) on a few fixed seeds: each seed's
 * schedule (triggers of every kind, events, cancels, outputs, and kill -9, SIGTERM, database
 * restarts, whole-cluster stops, retention passes, mode changes) runs against a small cluster on
 * an embedded PostgreSQL of the soak's own, and the checker judges the audit trail. The soak runs
 * as a child process, as `npm run soak` does: its nodes are worker threads, or real processes for
 * the seeds that draw them, and it stops every one of them on the way out.
 */
const RUN = fileURLToPath(new URL('../soak/dist/run.js', import.meta.url));
const OUTPUT = fileURLToPath(new URL('./output/fault-schedule', import.meta.url));
/**
 * Seed 7: real node processes, claims on, a rolling deploy's old node, an injected transient SQLSTATE
 * on episode inserts, a kill, a database restart and a whole-cluster stop. 34: worker threads, claims
 * off, short windows, kills and a whole-cluster stop of drains and kills. 43: claims on, two services,
 * kills and a 20 s whole-cluster stop. On 294a4ee each failed: 7 skipped events on the SQLSTATE
 * (issue 40 item 2), 34 expired a request after the stop (item 3), 43 failed work not_hosted (item 4).
 * On the odd seeds (7, 43) every node subscribes to the terminal lifecycle events, so every end
 * must write its one event through all of that; on 34 none reads them (the checker's lifecycle rule).
 */
const SEEDS = [7, 34, 43];
const DURATION_MS = 15_000;

interface Violation {
  rule: string;
  message: string;
}

interface SeedResult {
  seed: number;
  processes: boolean;
  violations: Violation[];
  replay: string;
  outputDir: string;
  faults: Record<string, number>;
  refused?: string;
}

describe('the randomized fault schedule, fixed seeds', () => {
  let soak: ChildProcess | undefined;
  let results: SeedResult[] = [];
  let stderr = '';

  beforeAll(async () => {
    const args = [
      RUN,
      '--seed',
      SEEDS.join(','),
      '--duration-ms',
      String(DURATION_MS),
      '--output',
      OUTPUT,
      '--json',
    ];
    // Its own embedded server even when the run has DATABASE_URL: the schedule restarts the database.
    const env = { ...process.env, DATABASE_URL: '' };
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    soak = child;
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    await new Promise<void>((resolve) => child.once('exit', () => resolve()));
    soak = undefined;
    const summary = stdout.trim().split('\n').pop() ?? '';
    try {
      results = (JSON.parse(summary) as { results: SeedResult[] }).results;
    } catch {
      throw new Error(`the soak printed no summary:\n${stdout}\n${stderr}`);
    }
  }, 240_000);

  afterAll(async () => {
    // Only when the test itself gave up on it: the soak then stops its nodes and its database.
    if (soak && soak.exitCode === null) {
      const exited = new Promise((resolve) => soak?.once('exit', resolve));
      soak.kill('SIGTERM');
      await exited;
    }
  });

  it('runs every seed, at least one with real node processes', () => {
    expect(results.map((r) => r.seed)).toEqual(SEEDS);
    expect(results.some((r) => r.processes)).toBe(true);
    expect(results.filter((r) => r.refused)).toEqual([]);
  });

  it.each(SEEDS)('seed %i: the checker finds no violation', (seed) => {
    const result = results.find((r) => r.seed === seed);
    expect(result).toBeDefined();
    const seen = (result?.violations ?? []).map((v) => `[${v.rule}] ${v.message}`);
    // On failure: the list, then the report with each episode's audit trail, and the replay.
    expect({
      seed,
      violations: seen,
      report: `${result?.outputDir}/report.txt`,
      replay: result?.replay,
    }).toEqual({
      seed,
      violations: [],
      report: `${result?.outputDir}/report.txt`,
      replay: result?.replay,
    });
  });
});
