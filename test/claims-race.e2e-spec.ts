import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const RACER = fileURLToPath(new URL('./fixtures/dist/claims-racer.js', import.meta.url));
const KEYS = 2000;

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

describe('claims across 4 real processes, one of them paused past its lease', () => {
  const database = useDatabase();
  const racers: ChildProcess[] = [];

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE claim_history (
        id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL, owner text NOT NULL,
        kind text NOT NULL, stolen_from text, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    await database.db.query(
      `CREATE TABLE claim_fenced_out (key text NOT NULL, fence bigint NOT NULL, owner text NOT NULL)`,
    );
    await database.db.query(`CREATE TABLE race_control (stop boolean NOT NULL)`);
    await database.db.query(`INSERT INTO race_control VALUES (false)`);
  });

  afterAll(async () => {
    for (const racer of racers) if (racer.exitCode === null) racer.kill('SIGKILL');
  });

  const count = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows[0].n as number;

  it('never lets two holders own a key at one fence, and every key shows a strictly increasing fence history', async () => {
    const outputs: string[] = [];
    const exits: Array<Promise<number | null>> = [];
    for (let i = 1; i <= 4; i++) {
      const child = spawn(process.execPath, [RACER], {
        env: {
          ...process.env,
          DATABASE_URL: database.url,
          RACER_ID: `racer-${i}`,
          RACE_KEYS: String(KEYS),
          RACE_LEASE_SECONDS: '1',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      outputs[i] = '';
      child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (outputs[i] += chunk));
      child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (outputs[i] += chunk));
      exits.push(new Promise((resolve) => child.once('exit', (code) => resolve(code))));
      racers.push(child);
    }
    const paused = racers[3];

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
    const codes = await Promise.all(exits);
    expect({ codes, outputs }).toMatchObject({ codes: [0, 0, 0, 0] });

    const stats = outputs
      .filter(Boolean)
      .map((out) => JSON.parse(/^RESULT (.*)$/m.exec(out)?.[1] ?? 'null') as RacerStats);
    expect(stats).toHaveLength(4);

    // No two holders at one fence of one key.
    expect(
      await count(`SELECT count(*)::int AS n FROM (
      SELECT key, fence FROM claim_history WHERE kind = 'acquired' GROUP BY key, fence HAVING count(*) > 1) dup`),
    ).toBe(0);
    // Per key, fences strictly increase in the order acquisitions were recorded.
    expect(
      await count(`SELECT count(*)::int AS n FROM (
      SELECT fence, lag(fence) OVER (PARTITION BY key ORDER BY id) AS previous
        FROM claim_history WHERE kind = 'acquired') h
      WHERE previous IS NOT NULL AND fence <= previous`),
    ).toBe(0);
    // Every completion belongs to the holder of that fence, and none is recorded after a newer fence was taken.
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
