import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Actor, CycliumModule, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import pg from 'pg';
import { commitsSoFar as commits, settleStats } from '../support/commits.js';
import { printTable, throughput } from '../support/measure.js';
import { NotifyOnlyBus } from '../support/notify-only-bus.js';

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

type BusKind = 'durable' | 'notify-only';

/** N episodes of one expectation, at most CONCURRENCY in flight, on one node with claims on. */
async function runEpisodes(
  url: string,
  expectation: 'k1' | 'k5',
  n: number,
  busKind: BusKind = 'durable',
  inFlight = CONCURRENCY,
): Promise<{ seconds: number; commits: number }> {
  const busPool = busKind === 'notify-only' ? new pg.Pool({ connectionString: url, max: 2 }) : undefined;
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: CONCURRENCY + 4 } }),
      CycliumModule.forRoot({
        nodeIdentity: `bench-${expectation}`,
        workClaims: 'postgres',
        jitterMs: 0,
        bus: busPool ? new NotifyOnlyBus(busPool, url) : 'postgres',
      }),
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
      while (i - completed >= inFlight) await new Promise<void>((resolve) => (waiting = resolve));
      const result = await episodes.trigger('bench', expectation, { i });
      if (result.status !== 'started') throw new Error(`episode ${i} was ${result.status}`);
    }
    while (completed < n) await new Promise<void>((resolve) => (waiting = resolve));
  } finally {
    off();
  }
  const seconds = (performance.now() - started) / 1000;
  await app.close();
  await busPool?.end();
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
  // Interleaved rounds (floor, then each configuration), summed: drift on a shared machine hits all alike.
  const configurations = [
    { label: 'K=1, 16 in flight, durable bus', expectation: 'k1', bus: 'durable', inFlight: CONCURRENCY },
    { label: 'K=1, 16 in flight, NOTIFY-only bus', expectation: 'k1', bus: 'notify-only', inFlight: CONCURRENCY },
    { label: 'K=5, 16 in flight, durable bus', expectation: 'k5', bus: 'durable', inFlight: CONCURRENCY },
    { label: 'K=1, 1 in flight, durable bus', expectation: 'k1', bus: 'durable', inFlight: 1 },
    { label: 'K=1, 1 in flight, NOTIFY-only bus', expectation: 'k1', bus: 'notify-only', inFlight: 1 },
  ] as const;
  const totals = configurations.map(() => ({ seconds: 0, commits: 0, n: 0 }));
  let floorSum = 0;
  for (let round = 0; round < ROUNDS; round++) {
    floorSum += await floor(url);
    for (const [i, c] of configurations.entries()) {
      const n = c.inFlight === 1 ? N / ROUNDS / 4 : N / ROUNDS;
      const measured = await runEpisodes(url, c.expectation, n, c.bus, c.inFlight);
      const total = totals[i] as { seconds: number; commits: number; n: number };
      total.seconds += measured.seconds;
      total.commits += measured.commits;
      total.n += n;
    }
  }
  const floorRate = floorSum / ROUNDS;
  const floorSecondsPerInsert = 1 / floorRate;
  printTable(`episodes: claims on, N = ${N.toLocaleString('en')} per configuration at 16 in flight (${N / 4} at 1)`, configurations.map((c, i) => {
    const total = totals[i] as { seconds: number; commits: number; n: number };
    return { configuration: c.label, 'episodes/s': Math.round(total.n / total.seconds), 'commits/episode': (total.commits / total.n).toFixed(2) };
  }));
  const [k1, , k5] = totals as [{ seconds: number; n: number }, unknown, { seconds: number; n: number }];
  const stepSeconds = (k5.seconds / k5.n - k1.seconds / k1.n) / 4;
  printTable('episodes: the cost of one step next to one bare single-row insert commit (16 in flight)', [
    {
      'floor inserts/s': Math.round(floorRate),
      'floor ms/insert': (floorSecondsPerInsert * 1000).toFixed(3),
      'marginal ms/step': (stepSeconds * 1000).toFixed(3),
      'step / insert': `${(stepSeconds / floorSecondsPerInsert).toFixed(2)}x`,
    },
  ]);
}
