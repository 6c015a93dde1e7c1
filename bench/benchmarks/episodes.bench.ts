import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Actor, CycliumModule, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import pg from 'pg';
import { printTable, throughput } from '../support/measure.js';

const N = 2_000;
const ROUNDS = 4;
const CONCURRENCY = 16;

@Injectable()
@Actor({ id: 'bench', maxConcurrentEpisodes: CONCURRENCY })
class BenchActor {
  @Expectation({ id: 'k1', trigger: 'manual' })
  async k1(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }

  @Expectation({ id: 'k5', trigger: 'manual' })
  async k5(ep: EpisodeContext<{ i: number }>): Promise<void> {
    for (let s = 1; s <= 5; s++) await ep.step(`s${s}`, () => ep.trigger.payload.i + s);
  }
}

/**
 * Commits so far in this database. Read on a short-lived connection: a backend that stays idle in
 * a pool flushes its statistics late and would leak its commits into the next measurement.
 */
async function commits(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(`SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()`);
    return Number(rows[0].n);
  } finally {
    await client.end();
  }
}

/** Waits until backends that exited have flushed their statistics. */
const settleStats = () => new Promise((resolve) => setTimeout(resolve, 1_500));

/** N episodes of one expectation, at most CONCURRENCY in flight, on one node with claims on. */
async function runEpisodes(url: string, expectation: 'k1' | 'k5', n: number): Promise<{ seconds: number; commits: number }> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: CONCURRENCY + 4 } }),
      CycliumModule.forRoot({ nodeIdentity: `bench-${expectation}`, workClaims: 'postgres', jitterMs: 0, bus: 'postgres' }),
    ],
    providers: [BenchActor],
  })
  class BenchModule {}

  await settleStats();
  const before = await commits(url);
  const app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  await app.init();
  const episodes = app.get(Episodes);
  let completed = 0;
  let waiting: (() => void) | undefined;
  const off = onCyclium('episode.completed', () => {
    completed++;
    waiting?.();
  });
  const started = performance.now();
  try {
    for (let i = 0; i < n; i++) {
      while (i - completed >= CONCURRENCY) await new Promise<void>((resolve) => (waiting = resolve));
      const result = await episodes.trigger('bench', expectation, { i });
      if (result.status !== 'started') throw new Error(`episode ${i} was ${result.status}`);
    }
    while (completed < n) await new Promise<void>((resolve) => (waiting = resolve));
  } finally {
    off();
  }
  const seconds = (performance.now() - started) / 1000;
  await app.close();
  await settleStats();
  // Every backend of the app has exited (and flushed its statistics) once close resolves.
  return { seconds, commits: (await commits(url)) - before - 1 };
}

/** Bare single-row insert commits per second at the episodes' concurrency, on a pool of its own. */
async function floor(url: string): Promise<number> {
  const pool = new pg.Pool({ connectionString: url, max: CONCURRENCY });
  try {
    await pool.query('CREATE TABLE IF NOT EXISTS bench_floor (k text PRIMARY KEY, v int NOT NULL)');
    const run = `${Date.now()}-${Math.random()}`;
    return await throughput(pool, CONCURRENCY, 1_500, (c, i) =>
      c.query('INSERT INTO bench_floor (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING', [`e:${run}:${i}`, i]),
    );
  } finally {
    await pool.end();
  }
}

/**
 * Episodes per second and database commits per episode (pg_stat_database.xact_commit) for
 * N = 2,000 episodes of K = 1 and K = 5 steps (in interleaved rounds), claims on, next to the floor:
 * bare single-row insert commits at the same concurrency. The marginal cost of a step is
 * (time at K = 5 − time at K = 1) / (4 × N).
 */
export async function episodesBench(url: string): Promise<void> {
  {
    // Interleaved rounds (floor, K = 1, K = 5), summed: drift on a shared machine hits all three alike.
    const k1 = { seconds: 0, commits: 0 };
    const k5 = { seconds: 0, commits: 0 };
    let floorSum = 0;
    for (let round = 0; round < ROUNDS; round++) {
      floorSum += await floor(url);
      for (const [total, expectation] of [[k1, 'k1'], [k5, 'k5']] as const) {
        const measured = await runEpisodes(url, expectation, N / ROUNDS);
        total.seconds += measured.seconds;
        total.commits += measured.commits;
      }
    }
    const floorRate = floorSum / ROUNDS;
    const floorSecondsPerInsert = 1 / floorRate;
    const stepSeconds = (k5.seconds - k1.seconds) / (4 * N);
    printTable(`episodes: N = ${N.toLocaleString('en')} per K, ${CONCURRENCY} in flight, claims on, PostgresBus`, [
      { K: 1, 'episodes/s': Math.round(N / k1.seconds), 'commits/episode': (k1.commits / N).toFixed(2), 'target ≤ K+3': 4 },
      { K: 5, 'episodes/s': Math.round(N / k5.seconds), 'commits/episode': (k5.commits / N).toFixed(2), 'target ≤ K+3': 8 },
    ]);
    printTable('episodes: the cost of one step next to one bare single-row insert commit (same concurrency)', [
      {
        'floor inserts/s': Math.round(floorRate),
        'floor ms/insert': (floorSecondsPerInsert * 1000).toFixed(3),
        'marginal ms/step': (stepSeconds * 1000).toFixed(3),
        'step / insert': `${(stepSeconds / floorSecondsPerInsert).toFixed(2)}x`,
        target: '≤ 2x',
      },
    ]);
  }
}
