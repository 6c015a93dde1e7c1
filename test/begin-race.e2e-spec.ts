/**
 * Batched begins across real processes: three nodes trigger the same keys at once, each in its
 * own order and 16 at a time, so their batches meet on dedupe keys in every order. Exactly one
 * episode per key runs (rule 2), on its claim's first fence and by the node that inserted it, and
 * no batch deadlocks with another (inserts and claims go in key order).
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';

const RACER = fileURLToPath(new URL('./fixtures/dist/begin-racer.js', import.meta.url));
const KEYS = 600;
const RACERS = 3;

interface RacerReport {
  racer: string;
  answers: Record<string, number>;
  ended: number;
}

describe('batched begins of the same keys on three real processes', () => {
  const database = useDatabase();
  const racers: ChildProcess[] = [];

  afterAll(() => {
    for (const racer of racers) if (racer.exitCode === null) racer.kill('SIGKILL');
  });

  const deadlocks = async () =>
    Number(
      (
        await database.db.query(
          `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`,
        )
      ).rows[0].deadlocks,
    );

  it('runs exactly one episode per key, claimed at fence 1 by its inserter, with no deadlock', async () => {
    const deadlocksBefore = await deadlocks();
    const runs = Array.from({ length: RACERS }, (_, i) => {
      const child = spawn(process.execPath, [RACER], {
        env: {
          ...process.env,
          DATABASE_URL: database.url,
          RACER_ID: `begin-racer-${i + 1}`,
          RACE_KEYS: String(KEYS),
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      racers.push(child);
      let output = '';
      child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
      child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
      const ready = new Promise<void>((resolve) =>
        child.stdout?.on('data', () => output.includes('ready') && resolve()),
      );
      const exit = new Promise<{ code: number | null; output: string }>((resolve) =>
        child.once('exit', (code) => resolve({ code, output })),
      );
      return { child, ready, exit };
    });
    // All three booted: they start triggering at the same moment.
    await Promise.race([
      Promise.all(runs.map((r) => r.ready)),
      Promise.all(runs.map((r) => r.exit)),
    ]);
    for (const run of runs) run.child.stdin?.end('go\n');
    const exits = await Promise.all(runs.map((r) => r.exit));
    expect(exits.map((e) => e.code)).toEqual(Array(RACERS).fill(0));
    const reports = exits.map(
      (e) => JSON.parse(e.output.trim().split('\n').pop() as string) as RacerReport,
    );

    // The key's one winner started it, or queued it behind its node's full slots.
    const won = (r: RacerReport) => (r.answers.started ?? 0) + (r.answers.queued ?? 0);
    expect(reports.reduce((sum, r) => sum + won(r), 0)).toBe(KEYS);
    for (const r of reports) {
      expect(r.ended).toBe(won(r));
      // Every other answer was a duplicate (or busy: the winner's claim was not committed yet).
      expect(
        Object.keys(r.answers).every((status) =>
          ['started', 'queued', 'duplicate', 'busy'].includes(status),
        ),
      ).toBe(true);
    }
    const { rows } = await database.db.query(`
      SELECT count(*)::int AS episodes, count(DISTINCT e.dedupe_key)::int AS keys,
             count(*) FILTER (WHERE e.status = 'done')::int AS done,
             count(*) FILTER (WHERE c.state = 'done' AND c.fence = 1 AND c.owner_node = e.owner_node)::int AS claimed_by_inserter,
             count(DISTINCT e.inserted_at)::int AS begin_transactions
        FROM cyclium_episodes e JOIN cyclium_work_claims c ON c.dedupe_key = e.dedupe_key
       WHERE e.dedupe_key LIKE 'begin-race:%'`);
    expect(rows[0]).toMatchObject({
      episodes: KEYS,
      keys: KEYS,
      done: KEYS,
      claimed_by_inserter: KEYS,
    });
    // Begins went out in batches (episodes of one batch share their transaction's now()).
    expect(rows[0].begin_transactions).toBeLessThan(KEYS / 2);
    expect(await deadlocks()).toBe(deadlocksBefore);
  }, 120_000);
});
