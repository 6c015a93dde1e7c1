import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  Actor,
  CycliumModule,
  Episodes,
  Expectation,
  onCyclium,
  type CycliumOptions,
  type EpisodeContext,
} from '@cyclium/nestjs';
import {
  countsSoFar,
  settleIdleStats,
  settleStats,
  since,
  statementSource,
  type Counts,
} from '../support/counters.js';
import { WARM_UP, insertFloor, keepInFlight, printTable } from '../support/measure.js';

const IN_FLIGHT = [1, 4, 16] as const;
/** Episodes per configuration and round, by in-flight count (fewer where each takes a round trip alone). */
const PER_ROUND: Record<(typeof IN_FLIGHT)[number], number> = { 1: 250, 4: 500, 16: 1_000 };
const ROUNDS = 2;

@Injectable()
@Actor({ id: 'bench', maxConcurrentEpisodes: 32 })
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

interface Measured extends Counts {
  seconds: number;
  n: number;
  /** This process's CPU time (user + system) over the measured run, in microseconds: the library's own cost, steadier than a rate. */
  cpuMicros: number;
}

const INTEGRITY = { keyId: 'bench', keys: { bench: 'bench-integrity-secret-0123456789abcdef' } };
/** The integrity pair: alternating batches on a node with the option and one without, at 16 in flight. */
const PAIR = { batches: 20, perBatch: 200, inFlight: 16 };

interface Configuration {
  expectation: 'k1' | 'k5';
  inFlight: number;
}

/** A node of the bench actor on its own pool, claims on. */
async function bootNode(url: string, cyclium: CycliumOptions): Promise<INestApplicationContext> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        name: cyclium.dataSource,
        type: 'postgres',
        url,
        extra: { max: 20 },
      }),
      CycliumModule.forRoot({ workClaims: 'postgres', jitterMs: 0, ...cyclium }),
    ],
    providers: [BenchActor],
  })
  class BenchModule {}
  const app = await NestFactory.createApplicationContext(BenchModule, {
    logger: ['error', 'warn'],
  });
  await app.init();
  return app;
}

/** Runs `count` episodes of `expectation` on `app`, at most `inFlight` at once. */
function runMany(
  app: INestApplicationContext,
  expectation: 'k1' | 'k5',
  count: number,
  inFlight: number,
): Promise<void> {
  const episodes = app.get(Episodes);
  return keepInFlight(
    count,
    inFlight,
    async (i) => {
      const result = await episodes.trigger('bench', expectation, { i });
      if (result.status !== 'started') throw new Error(`episode ${i} was ${result.status}`);
    },
    (done) => onCyclium('episode.completed', done),
  );
}

/**
 * The `integrity` option's cost: two nodes in this process (envs of their own, so neither reads
 * the other's events), one signing and one not, take turns running batches of episodes at 16 in
 * flight; each side's time and this process's CPU time are summed over its batches. Short turns
 * put the machine's drift on both sides alike, which whole runs minutes apart do not.
 */
async function integrityPair(
  url: string,
  expectation: 'k1' | 'k5',
): Promise<{ off: Measured; on: Measured }> {
  const off = await bootNode(url, {
    nodeIdentity: `pair-${expectation}-off`,
    env: 'pair-off',
    dataSource: 'plain',
  });
  const on = await bootNode(url, {
    nodeIdentity: `pair-${expectation}-on`,
    env: 'pair-on',
    integrity: INTEGRITY,
    dataSource: 'signed',
  });
  const sides = {
    off: { app: off, seconds: 0, n: 0, cpuMicros: 0 },
    on: { app: on, seconds: 0, n: 0, cpuMicros: 0 },
  };
  try {
    for (const side of Object.values(sides))
      await runMany(side.app, expectation, WARM_UP, PAIR.inFlight);
    for (let batch = 0; batch < PAIR.batches; batch++) {
      for (const side of batch % 2 === 0 ? [sides.off, sides.on] : [sides.on, sides.off]) {
        const started = performance.now();
        const cpu = process.cpuUsage();
        await runMany(side.app, expectation, PAIR.perBatch, PAIR.inFlight);
        const used = process.cpuUsage(cpu);
        side.seconds += (performance.now() - started) / 1000;
        side.cpuMicros += used.user + used.system;
        side.n += PAIR.perBatch;
      }
    }
  } finally {
    await off.close();
    await on.close();
  }
  const measured = (side: typeof sides.off): Measured => ({
    seconds: side.seconds,
    n: side.n,
    cpuMicros: side.cpuMicros,
    commits: 0,
    statements: 0,
  });
  return { off: measured(sides.off), on: measured(sides.on) };
}

/** N episodes of one expectation started with `Episodes.trigger`, at most `inFlight` at once, on one node with claims on. */
async function runEpisodes(
  url: string,
  { expectation, inFlight }: Configuration,
  n: number,
): Promise<Measured> {
  const app = await bootNode(url, { nodeIdentity: `bench-${expectation}-${inFlight}` });
  await runMany(app, expectation, WARM_UP, inFlight);
  await settleIdleStats();
  const before = await countsSoFar(url);
  const started = performance.now();
  const cpu = process.cpuUsage();
  await runMany(app, expectation, n, inFlight);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  // Closing flushes the bus's last wake-up and ends every backend, so their statistics are in.
  await app.close();
  await settleStats();
  return {
    seconds,
    n,
    cpuMicros: used.user + used.system,
    ...since(before, await countsSoFar(url)),
  };
}

/**
 * Episodes per second, statements and commits per episode for K = 1 and K = 5 steps at 1, 4 and
 * 16 in flight (claims on, the durable bus), each next to the bare single-insert floor at the same
 * concurrency, and at 16 in flight once more with the `integrity` option on (signed checkpoints
 * and lifecycle events). Rounds are interleaved (floor, then every configuration) and summed, so
 * drift on a shared machine hits them all alike. Statements and commits include the bus's
 * wake-ups and reads.
 */
export async function episodesBench(url: string): Promise<void> {
  const source = await statementSource(url);
  const configurations: Configuration[] = IN_FLIGHT.flatMap((inFlight) =>
    (['k1', 'k5'] as const).map((expectation) => ({ expectation, inFlight })),
  );
  const totals = configurations.map(() => ({
    seconds: 0,
    n: 0,
    commits: 0,
    statements: 0,
    cpuMicros: 0,
  }));
  const floors = new Map<number, number>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const clients of IN_FLIGHT)
      floors.set(clients, (floors.get(clients) ?? 0) + (await insertFloor(url, clients)) / ROUNDS);
    for (const [i, c] of configurations.entries()) {
      const measured = await runEpisodes(
        url,
        c,
        PER_ROUND[c.inFlight as (typeof IN_FLIGHT)[number]],
      );
      const total = totals[i] as Measured;
      total.seconds += measured.seconds;
      total.n += measured.n;
      total.commits += measured.commits;
      total.statements += measured.statements;
      total.cpuMicros += measured.cpuMicros;
    }
  }
  printTable(
    `episodes: started by Episodes.trigger, claims on, durable bus; statements counted by ${source}`,
    configurations.map((c, i) => {
      const total = totals[i] as Measured;
      const rate = total.n / total.seconds;
      const floorRate = floors.get(c.inFlight) as number;
      return {
        K: c.expectation === 'k1' ? 1 : 5,
        'in flight': c.inFlight,
        'episodes/s': Math.round(rate),
        'statements/episode': (total.statements / total.n).toFixed(2),
        'commits/episode': (total.commits / total.n).toFixed(2),
        'node CPU µs/episode': Math.round(total.cpuMicros / total.n),
        'floor inserts/s': Math.round(floorRate),
        'episodes / floor': `${(rate / floorRate).toFixed(2)}x`,
      };
    }),
  );
  await integrityBench(url);
}

/** The integrity pair alone (`npm run bench -- integrity`); `episodes` ends with it. */
export async function integrityBench(url: string): Promise<void> {
  const pairs = [];
  for (const expectation of ['k1', 'k5'] as const)
    pairs.push({ expectation, ...(await integrityPair(url, expectation)) });
  printTable(
    `integrity: ${PAIR.batches} alternating batches of ${PAIR.perBatch} episodes per side at ${PAIR.inFlight} in flight (one node signing, one not)`,
    pairs.map(({ expectation, off, on }) => ({
      K: expectation === 'k1' ? 1 : 5,
      'episodes/s off': Math.round(off.n / off.seconds),
      'episodes/s on': Math.round(on.n / on.seconds),
      'throughput cost': `${((1 - on.n / on.seconds / (off.n / off.seconds)) * 100).toFixed(1)} %`,
      'node CPU µs/episode off': Math.round(off.cpuMicros / off.n),
      'node CPU µs/episode on': Math.round(on.cpuMicros / on.n),
      'CPU cost': `${((on.cpuMicros / on.n / (off.cpuMicros / off.n) - 1) * 100).toFixed(1)} %`,
    })),
  );
}
