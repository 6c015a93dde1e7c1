import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  Actor,
  CycliumModule,
  Episodes,
  Expectation,
  Recovery,
  onCyclium,
  type CycliumOptions,
  type EpisodeContext,
} from '@cyclium/nestjs';
import pg from 'pg';
import { statementSource } from '../support/counters.js';
import { insertOrphans } from '../support/history-fixtures.js';
import { WARM_UP, insertFloor, keepInFlight, printTable } from '../support/measure.js';

/** History sizes, built one after the other in the same tables (the second adds to the first). */
const SIZES = [100_000, 1_000_000] as const;
const IN_FLIGHT = [4, 16] as const;
const PER_RUN: Record<(typeof IN_FLIGHT)[number], number> = { 4: 600, 16: 1_200 };
/**
 * Sweeps with nothing to recover per size, and rounds of ORPHANS orphans. An idle sweep's wall time
 * is a few milliseconds of mostly round trips, noise on a shared machine: the median of many is
 * printed, and beside it the time its statements spent in the server and the pages they touched.
 */
const IDLE_SWEEPS = 21;
const ORPHAN_ROUNDS = 2;
const ORPHANS = 1_000;
const BURST = 10_000;
/** History rows written per statement while building. */
const CHUNK = 100_000;
const STALE_AFTER_MS = 5_000;

@Injectable()
@Actor({ id: 'bench', maxConcurrentEpisodes: 32 })
class HistoryActor {
  @Expectation({ id: 'k5', trigger: 'manual' })
  async k5(ep: EpisodeContext<{ i: number }>): Promise<void> {
    for (let s = 1; s <= 5; s++) await ep.step(`s${s}`, () => ep.trigger.payload.i + s);
  }

  @Expectation({ id: 'orphan', trigger: 'manual', recoveryPolicy: 'restart' })
  async orphan(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }
}

/** A node of the bench actor on its own pool, claims on, as `episodes` boots it. */
async function bootNode(url: string, cyclium: CycliumOptions): Promise<INestApplicationContext> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 20 } }),
      CycliumModule.forRoot({ workClaims: 'postgres', jitterMs: 0, ...cyclium }),
    ],
    providers: [HistoryActor],
  })
  class HistoryModule {}
  const app = await NestFactory.createApplicationContext(HistoryModule, {
    logger: ['error', 'warn'],
  });
  await app.init();
  return app;
}

/**
 * Finished episodes `from + 1` to `to`, as a node leaves them: `done`, one journal row each, a
 * `done` claim for every other one, finished over the past eight weeks. ANALYZEd afterwards, as
 * autovacuum would have by the time such a history exists.
 */
async function buildHistory(db: pg.Pool, from: number, to: number): Promise<void> {
  for (let start = from; start < to; start += CHUNK) {
    await db.query(
      `WITH added AS (
         INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, attempts,
                                       started_at, finished_at, inserted_at, updated_at)
         SELECT 'bench', 'k5', 'manual', jsonb_build_object('type', 'manual', 'payload', jsonb_build_object('i', i)), 'done', 'history-node', 0,
                at - interval '2 seconds', at, at - interval '2 seconds', at
           FROM generate_series($1::int + 1, $2::int) i,
                LATERAL (SELECT now() - make_interval(secs => (i::bigint * 4_801) % (8 * 7 * 86_400)) AS at) t
         RETURNING id, started_at, finished_at, (trigger_ref->'payload'->>'i')::int AS i),
       journal AS (
         INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref, duration_ms, created_at)
         SELECT id, 1, 'step', 's1', jsonb_build_object('v', i), 1, finished_at - interval '1 second' FROM added)
       INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, finished_at)
       SELECT 'episode:' || id, 'done', 'history-node', finished_at, started_at, finished_at FROM added WHERE i % 2 = 0`,
      [start, Math.min(start + CHUNK, to)],
    );
  }
  await db.query('ANALYZE cyclium_episodes, cyclium_episode_steps, cyclium_work_claims');
}

/** Resolves once no episode is running or queued. */
async function allEnded(db: pg.Pool, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (
    (await db.query(`SELECT 1 FROM cyclium_episodes WHERE status IN ('running', 'queued') LIMIT 1`))
      .rowCount !== 0
  ) {
    if (performance.now() > deadline)
      throw new Error(`history: episodes still running after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function runMany(app: INestApplicationContext, count: number, inFlight: number): Promise<void> {
  const episodes = app.get(Episodes);
  return keepInFlight(
    count,
    inFlight,
    async (i) => {
      const result = await episodes.trigger('bench', 'k5', { i });
      if (result.status !== 'started') throw new Error(`episode ${i} was ${result.status}`);
    },
    (done) => onCyclium('episode.completed', done),
  );
}

/** Server time and shared pages touched by every statement on this database so far; null without pg_stat_statements. */
async function serverTotals(
  url: string,
  db: pg.Pool,
): Promise<{ ms: number; pages: number } | null> {
  if ((await statementSource(url)) !== 'pg_stat_statements') return null;
  const { rows } = await db.query<{ ms: number; pages: string }>(
    `SELECT coalesce(sum(total_exec_time), 0)::float8 AS ms, coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint AS pages
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return { ms: Number(rows[0]?.ms), pages: Number(rows[0]?.pages) };
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

interface AtSize {
  /** Episodes/s and the insert floor measured around the run, by in-flight count. */
  rate: Map<number, { episodes: number; floor: number }>;
  idleSweepMs: number;
  /** Per idle sweep, from pg_stat_statements (null without it): server time and shared pages touched. */
  idleSweepServer: { ms: number; pages: number } | null;
  orphanSweepMs: number;
}

/** Throughput and sweep times with the history as it now stands. */
async function measure(url: string, db: pg.Pool): Promise<AtSize> {
  const rate = new Map<number, { episodes: number; floor: number }>();
  const app = await bootNode(url, { nodeIdentity: 'history-bench', recovery: { onBoot: false } });
  try {
    for (const inFlight of IN_FLIGHT) {
      // The floor just before and just after the run, averaged: the machine's drift over the run hits both alike.
      const before = await insertFloor(url, inFlight);
      await runMany(app, WARM_UP, inFlight);
      const started = performance.now();
      await runMany(app, PER_RUN[inFlight], inFlight);
      const episodes = PER_RUN[inFlight] / ((performance.now() - started) / 1000);
      rate.set(inFlight, { episodes, floor: (before + (await insertFloor(url, inFlight))) / 2 });
    }
    const recovery = app.get(Recovery);
    const idle: number[] = [];
    const serverBefore = await serverTotals(url, db);
    for (let i = 0; i < IDLE_SWEEPS; i++) {
      const started = performance.now();
      const result = await recovery.sweep({ staleAfterMs: STALE_AFTER_MS });
      idle.push(performance.now() - started);
      if (result.restarted + result.failed + result.notHosted > 0)
        throw new Error(`history: an idle sweep acted: ${JSON.stringify(result)}`);
    }
    const serverAfter = await serverTotals(url, db);
    const idleSweepServer =
      serverBefore && serverAfter
        ? {
            ms: (serverAfter.ms - serverBefore.ms) / IDLE_SWEEPS,
            pages: (serverAfter.pages - serverBefore.pages) / IDLE_SWEEPS,
          }
        : null;
    const orphaned: number[] = [];
    for (let round = 0; round < ORPHAN_ROUNDS; round++) {
      await insertOrphans(db, 'bench', 'orphan', ORPHANS);
      const started = performance.now();
      const result = await recovery.sweep({ staleAfterMs: STALE_AFTER_MS });
      orphaned.push(performance.now() - started);
      if (result.restarted !== ORPHANS)
        throw new Error(`history: the sweep restarted ${result.restarted} of ${ORPHANS} orphans`);
      await allEnded(db, 60_000);
    }
    return {
      rate,
      idleSweepMs: median(idle),
      idleSweepServer,
      orphanSweepMs: orphaned.reduce((a, b) => a + b, 0) / orphaned.length,
    };
  } finally {
    await app.close();
  }
}

/**
 * A node dies with BURST episodes running: a node booted with a 1 s recovery interval takes them
 * over, sweep after sweep. Sweeps needed until every orphan was taken, and the time to that and to
 * the last one ending.
 */
async function burst(url: string, db: pg.Pool): Promise<Record<string, string | number>> {
  await insertOrphans(db, 'bench', 'orphan', BURST);
  const sweeps: number[] = [];
  let taken = 0;
  let takenAt = 0;
  const off = onCyclium('recovery.sweep', (result) => {
    sweeps.push(result.restarted);
    taken += result.restarted;
    if (taken >= BURST && takenAt === 0) takenAt = performance.now();
  });
  const started = performance.now();
  const app = await bootNode(url, {
    nodeIdentity: 'history-burst',
    recovery: { settleMs: 0, intervalMs: 1_000, staleAfterMs: STALE_AFTER_MS },
  });
  try {
    await allEnded(db, 180_000);
    const ended = performance.now();
    const needed =
      sweeps.findIndex((_, i) => sweeps.slice(0, i + 1).reduce((a, b) => a + b, 0) >= BURST) + 1;
    return {
      'sweeps until all taken': needed,
      'restarted per sweep': sweeps.slice(0, Math.max(needed, 1)).join(' + '),
      'boot → all taken (s)': ((takenAt - started) / 1000).toFixed(1),
      'boot → all ended (s)': ((ended - started) / 1000).toFixed(1),
    };
  } finally {
    off();
    await app.close();
  }
}

/**
 * Whether a long history slows the live path: for 100,000 and then 1,000,000 finished episodes
 * in the tables, K = 5 episodes/s at 4 and 16 in flight (each next to the insert floor measured
 * around it), and the recovery sweep's time with nothing to recover and with 1,000 orphans;
 * then 10,000 orphans at once on top of the larger history.
 */
export async function historyBench(url: string): Promise<void> {
  const db = new pg.Pool({ connectionString: url, max: 2 });
  db.on('error', () => undefined);
  try {
    const measured: AtSize[] = [];
    let built = 0;
    for (const size of SIZES) {
      const started = performance.now();
      await buildHistory(db, built, size);
      built = size;
      process.stdout.write(
        `history: ${size.toLocaleString('en')} finished episodes built in ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
      );
      measured.push(await measure(url, db));
    }
    const [small, large] = measured as [AtSize, AtSize];
    const rows: Array<Record<string, string | number>> = [];
    for (const inFlight of IN_FLIGHT) {
      const s = small.rate.get(inFlight) as { episodes: number; floor: number };
      const l = large.rate.get(inFlight) as { episodes: number; floor: number };
      rows.push({
        figure: `K5 at ${inFlight} in flight: episodes/s (÷ floor)`,
        '100k': `${Math.round(s.episodes)} (${(s.episodes / s.floor).toFixed(2)}x)`,
        '1M': `${Math.round(l.episodes)} (${(l.episodes / l.floor).toFixed(2)}x)`,
        'cost 1M/100k': (s.episodes / s.floor / (l.episodes / l.floor)).toFixed(2),
      });
    }
    rows.push(
      {
        figure: 'sweep, nothing to recover (ms, median)',
        '100k': small.idleSweepMs.toFixed(1),
        '1M': large.idleSweepMs.toFixed(1),
        'cost 1M/100k': (large.idleSweepMs / small.idleSweepMs).toFixed(2),
      },
      ...(small.idleSweepServer && large.idleSweepServer
        ? [
            {
              figure: 'sweep, nothing to recover: server ms / pages',
              '100k': `${small.idleSweepServer.ms.toFixed(2)} / ${Math.round(small.idleSweepServer.pages)}`,
              '1M': `${large.idleSweepServer.ms.toFixed(2)} / ${Math.round(large.idleSweepServer.pages)}`,
              'cost 1M/100k': `${(large.idleSweepServer.ms / small.idleSweepServer.ms).toFixed(2)} / ${(large.idleSweepServer.pages / small.idleSweepServer.pages).toFixed(2)}`,
            },
          ]
        : []),
      {
        figure: `sweep, ${ORPHANS.toLocaleString('en')} orphans (ms, mean)`,
        '100k': small.orphanSweepMs.toFixed(0),
        '1M': large.orphanSweepMs.toFixed(0),
        'cost 1M/100k': (large.orphanSweepMs / small.orphanSweepMs).toFixed(2),
      },
    );
    printTable(
      'history: the live path with 100,000 and 1,000,000 finished episodes in the tables (cost 1M/100k: > 1 is slower at 1M)',
      rows,
    );
    printTable(
      `history: ${BURST.toLocaleString('en')} orphans of a dead node, one node sweeping every 1 s, on the 1M history`,
      [await burst(url, db)],
    );
  } finally {
    await db.end();
  }
}
