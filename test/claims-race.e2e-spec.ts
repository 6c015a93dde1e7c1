import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const RACER = fileURLToPath(new URL('./fixtures/dist/claims-racer.js', import.meta.url));
const ROW_RACER = fileURLToPath(new URL('./fixtures/dist/row-claims-racer.js', import.meta.url));
const KEYS = 2000;

interface Racer {
  child: ChildProcess;
  exit: Promise<number | null>;
  output: () => string;
}

/** Starts racer `id` (the fixture at `script`) on `url`, its output kept for the assertions. */
function spawnRacer(script: string, id: string, url: string, extra: Record<string, string>): Racer {
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, DATABASE_URL: url, RACER_ID: id, RACE_LEASE_SECONDS: '1', ...extra },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exit, output: () => output };
}

/** The statistics line every racer prints as it stops. */
const resultOf = (racer: Racer) =>
  JSON.parse(/^RESULT (.*)$/m.exec(racer.output())?.[1] ?? 'null') as { racer: string };

/**
 * What any number of claimers of one key must leave in `claim_history`, whatever shape they claim
 * in: no two holders at one fence, fences that only rise in the order acquisitions were recorded,
 * and each completion recorded by the holder of its fence before anyone took a newer one.
 */
async function expectOneHolderAtATime(count: (sql: string) => Promise<number>): Promise<void> {
  expect(
    await count(`SELECT count(*)::int AS n FROM (
      SELECT key, fence FROM claim_history WHERE kind = 'acquired' GROUP BY key, fence HAVING count(*) > 1) dup`),
  ).toBe(0);
  expect(
    await count(`SELECT count(*)::int AS n FROM (
      SELECT fence, lag(fence) OVER (PARTITION BY key ORDER BY id) AS previous
        FROM claim_history WHERE kind = 'acquired') h
      WHERE previous IS NOT NULL AND fence <= previous`),
  ).toBe(0);
  expect(
    await count(`SELECT count(*)::int AS n FROM claim_history c
      WHERE c.kind = 'completed' AND NOT EXISTS (
        SELECT 1 FROM claim_history a WHERE a.kind = 'acquired' AND a.key = c.key AND a.fence = c.fence AND a.owner = c.owner)`),
  ).toBe(0);
  expect(
    await count(`SELECT count(*)::int AS n FROM claim_history c
      JOIN claim_history newer ON newer.key = c.key AND newer.kind = 'acquired' AND newer.fence > c.fence AND newer.id < c.id
      WHERE c.kind = 'completed'`),
  ).toBe(0);
}

interface RacerStats {
  racer: string;
  acquired: number;
  steals: number;
  busy: number;
  completed: number;
  lostBeforeWrite: number;
  fencedOut: number;
  /** Acquisitions whose history write was fenced out, each reported in claim_fenced_out. */
  unrecorded: number;
}

/**
 * The history tables a race writes, and the flag that stops it; racers killed after the file.
 * `count` reads one `n` from the race's database.
 */
function useRaceTables(database: ReturnType<typeof useDatabase>): {
  racers: Racer[];
  count: (sql: string, params?: unknown[]) => Promise<number>;
} {
  const racers: Racer[] = [];
  const count = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows[0].n as number;
  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE claim_history (
        id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL, owner text NOT NULL,
        kind text NOT NULL, stolen_from text, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    // For the checks, not the race: they look each claim row's history up by key (2,000 keys over
    // tens of thousands of rows), which without it is a scan of the whole history per key.
    await database.db.query(`CREATE INDEX claim_history_key ON claim_history (key, kind, fence)`);
    await database.db.query(
      `CREATE TABLE claim_fenced_out (key text NOT NULL, fence bigint NOT NULL, owner text NOT NULL)`,
    );
    await database.db.query(`CREATE TABLE race_control (stop boolean NOT NULL)`);
    await database.db.query(`INSERT INTO race_control VALUES (false)`);
  });
  afterAll(async () => {
    for (const racer of racers) if (racer.child.exitCode === null) racer.child.kill('SIGKILL');
  });
  return { racers, count };
}

describe('claims across 4 real processes, one of them paused past its lease', () => {
  const database = useDatabase();
  const { racers, count } = useRaceTables(database);

  it('never lets two holders own a key at one fence, and every key shows a strictly increasing fence history', async () => {
    for (let i = 1; i <= 4; i++)
      racers.push(spawnRacer(RACER, `racer-${i}`, database.url, { RACE_KEYS: String(KEYS) }));
    const paused = (racers[3] as Racer).child;

    await waitFor(
      'racer-4 to hold claims',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM claim_history WHERE owner = 'racer-4' AND kind = 'acquired'`,
        )) >= 100,
      60_000,
    );
    paused.kill('SIGSTOP');
    const pausedAt = await count(`SELECT max(id)::int AS n FROM claim_history`);
    // Peers take over racer-4's claims once their leases lapse (by the database clock).
    await waitFor(
      'a peer to steal a claim of the paused racer-4',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM claim_history WHERE stolen_from = 'racer-4'`,
        )) >= 1,
      30_000,
      100,
    );
    paused.kill('SIGCONT');
    await waitFor(
      'racer-4 to work again after resuming',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM claim_history WHERE owner = 'racer-4' AND id > $1`,
          [pausedAt],
        )) >= 20,
      60_000,
    );
    await database.db.query(`UPDATE race_control SET stop = true`);
    const codes = await Promise.all(racers.map((r) => r.exit));
    expect({ codes, outputs: racers.map((r) => r.output()) }).toMatchObject({
      codes: [0, 0, 0, 0],
    });
    const stats = racers.map(resultOf) as RacerStats[];
    expect(stats).toHaveLength(4);

    await expectOneHolderAtATime(count);
    // The claim rows never lag the history: no recorded acquisition is newer than its row.
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_work_claims w
      WHERE w.fence < (SELECT max(fence) FROM claim_history h WHERE h.key = w.dedupe_key AND h.kind = 'acquired')`),
    ).toBe(0);
    // A row may be ahead of the history: its last holder acquired it, then stalled past the lease
    // before its fenced write, so it recorded nothing. Every such row is explained by a racer's
    // report of exactly that acquisition...
    const ahead = await count(`SELECT count(*)::int AS n FROM cyclium_work_claims w
      WHERE w.fence > coalesce((SELECT max(fence) FROM claim_history h WHERE h.key = w.dedupe_key AND h.kind = 'acquired'), 0)`);
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_work_claims w
      WHERE w.fence > coalesce((SELECT max(fence) FROM claim_history h WHERE h.key = w.dedupe_key AND h.kind = 'acquired'), 0)
        AND NOT EXISTS (SELECT 1 FROM claim_fenced_out f WHERE f.key = w.dedupe_key AND f.fence = w.fence)`),
    ).toBe(0);
    // ...and, more strongly, every fence the adapter handed out for a key (1 up to the row's fence)
    // was taken by exactly one racer, which either recorded it or reported it fenced out.
    expect(
      await count(`WITH issued AS (
        SELECT key, fence FROM claim_history WHERE kind = 'acquired'
        UNION ALL SELECT key, fence FROM claim_fenced_out)
      SELECT count(*)::int AS n FROM cyclium_work_claims w
       CROSS JOIN LATERAL (SELECT count(*) AS total, count(DISTINCT fence) AS distinct_fences, min(fence) AS low, max(fence) AS high
                             FROM issued i WHERE i.key = w.dedupe_key) a
       WHERE a.total <> w.fence OR a.distinct_fences <> w.fence OR a.low <> 1 OR a.high <> w.fence`),
    ).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM cyclium_work_claims`)).toBe(KEYS);
    const reported = await count(`SELECT count(*)::int AS n FROM claim_fenced_out`);
    expect(reported).toBe(stats.reduce((sum, s) => sum + s.unrecorded, 0));
    expect(reported).toBeGreaterThanOrEqual(ahead);

    // The pause really cost racer-4 its leases, and the steals really happened.
    const four = stats.find((s) => s.racer === 'racer-4') as RacerStats;
    expect(four.lostBeforeWrite + four.fencedOut).toBeGreaterThan(0);
    expect(stats.reduce((sum, s) => sum + s.steals, 0)).toBeGreaterThan(0);
  }, 240_000);
});

/**
 * The contract half of migration 31 beside today's claims: two processes claim episodes in their
 * rows alone (row-claims-racer.ts, as the contract will), two claim them in cyclium_work_claims
 * (this release, and the previous one's statements, which are the same), all for the same 300
 * episodes, and one of each kind is paused past its lease. Every claim write of the table ones
 * goes through the triggers, which hold them to the row's claim; the row ones take an episode
 * that has a claim row over through that row (its owner and fence moved), and claim in the row
 * alone only when it has none.
 */
describe('claims in the episode row and in the claim table, raced across 4 processes', () => {
  const database = useDatabase();
  const { racers, count } = useRaceTables(database);

  it('never lets two holders own an episode at one fence, whichever shape each claims in', async () => {
    await database.db.query(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status)
       SELECT 'race', 'x', 'manual', '{}', 'running' FROM generate_series(1, 300)`,
    );
    const table = { RACE_KEY_SOURCE: 'episodes' };
    racers.push(
      spawnRacer(RACER, 'table-1', database.url, table),
      spawnRacer(RACER, 'table-2', database.url, table),
      spawnRacer(ROW_RACER, 'row-1', database.url, {}),
      spawnRacer(ROW_RACER, 'row-2', database.url, {}),
    );
    const acquired = (owner: string) =>
      count(`SELECT count(*)::int AS n FROM claim_history WHERE owner = $1 AND kind = 'acquired'`, [
        owner,
      ]);
    await waitFor(
      'every racer to hold claims',
      async () =>
        (await Promise.all(['table-1', 'table-2', 'row-1', 'row-2'].map(acquired))).every(
          (n) => n >= 50,
        ),
      60_000,
    );
    // A takeover, whoever made it: an acquisition after one its holder never completed. (A table
    // claimer's adapter names only a previous holder of the table's row as stolen from.)
    const takeovers = `
      WITH a AS (
        SELECT key, owner, lag(owner) OVER (PARTITION BY key ORDER BY id) AS previous,
               lag(fence) OVER (PARTITION BY key ORDER BY id) AS previous_fence
          FROM claim_history WHERE kind = 'acquired')
      SELECT * FROM a
       WHERE previous IS NOT NULL AND NOT EXISTS (
         SELECT 1 FROM claim_history c
          WHERE c.kind = 'completed' AND c.key = a.key AND c.fence = a.previous_fence)`;
    const crossings = () =>
      count(`
        SELECT count(DISTINCT (split_part(previous, '-', 1), split_part(owner, '-', 1)))::int AS n
          FROM (${takeovers}) t
         WHERE split_part(previous, '-', 1) <> split_part(owner, '-', 1)`);
    // One of each shape stops past its lease and the others take its claims over, until each shape
    // has taken episodes over from the other.
    const paused = [racers[1], racers[3]] as Racer[];
    for (let round = 0; round < 10 && (await crossings()) < 2; round++) {
      const before = await count(`SELECT count(*)::int AS n FROM (${takeovers}) t`);
      for (const racer of paused) racer.child.kill('SIGSTOP');
      await waitFor(
        'the paused racers’ claims taken over',
        async () => (await count(`SELECT count(*)::int AS n FROM (${takeovers}) t`)) > before,
        30_000,
        100,
      );
      await new Promise((resolve) => setTimeout(resolve, 1_500)); // every lease of theirs lapses
      const [table, row] = [await acquired('table-2'), await acquired('row-2')];
      for (const racer of paused) racer.child.kill('SIGCONT');
      await waitFor(
        'the paused racers to work again',
        async () => (await acquired('table-2')) > table && (await acquired('row-2')) > row,
        30_000,
      );
    }
    await database.db.query(`UPDATE race_control SET stop = true`);
    const codes = await Promise.all(racers.map((r) => r.exit));
    expect({ codes, outputs: racers.map((r) => r.output()) }).toMatchObject({
      codes: [0, 0, 0, 0],
    });

    await expectOneHolderAtATime(count);
    // The shapes really met: each took episodes over from the other.
    expect(await crossings()).toBe(2);
    // The episode rows are never behind the history.
    expect(
      await count(`SELECT count(*)::int AS n FROM cyclium_episodes e
        WHERE e.actor_id = 'race' AND coalesce(e.claim_fence, 0) < (
          SELECT max(fence) FROM claim_history h WHERE h.key = 'episode:' || e.id AND h.kind = 'acquired')`),
    ).toBe(0);
  }, 240_000);
});
