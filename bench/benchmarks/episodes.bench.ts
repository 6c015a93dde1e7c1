import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Actor, CycliumModule, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import { countsSoFar, settleIdleStats, settleStats, since, statementSource, type Counts } from '../support/counters.js';
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
}

/** N episodes of one expectation started with `Episodes.trigger`, at most `inFlight` at once, on one node with claims on. */
async function runEpisodes(url: string, expectation: 'k1' | 'k5', n: number, inFlight: number): Promise<Measured> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 20 } }),
      CycliumModule.forRoot({ nodeIdentity: `bench-${expectation}-${inFlight}`, workClaims: 'postgres', jitterMs: 0 }),
    ],
    providers: [BenchActor],
  })
  class BenchModule {}

  const app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  await app.init();
  const episodes = app.get(Episodes);
  const runMany = (count: number) =>
    keepInFlight(
      count,
      inFlight,
      async (i) => {
        const result = await episodes.trigger('bench', expectation, { i });
        if (result.status !== 'started') throw new Error(`episode ${i} was ${result.status}`);
      },
      (done) => onCyclium('episode.completed', done),
    );
  await runMany(WARM_UP);
  await settleIdleStats();
  const before = await countsSoFar(url);
  const started = performance.now();
  await runMany(n);
  const seconds = (performance.now() - started) / 1000;
  // Closing flushes the bus's last wake-up and ends every backend, so their statistics are in.
  await app.close();
  await settleStats();
  return { seconds, n, ...since(before, await countsSoFar(url)) };
}

/**
 * Episodes per second, statements and commits per episode for K = 1 and K = 5 steps at 1, 4 and
 * 16 in flight (claims on, the durable bus), each next to the bare single-insert floor at the same
 * concurrency. Rounds are interleaved (floor, then every configuration) and summed, so drift on a
 * shared machine hits them all alike. Statements and commits include the bus's wake-ups and reads.
 */
export async function episodesBench(url: string): Promise<void> {
  const source = await statementSource(url);
  const configurations = IN_FLIGHT.flatMap((inFlight) => (['k1', 'k5'] as const).map((expectation) => ({ expectation, inFlight })));
  const totals = configurations.map(() => ({ seconds: 0, n: 0, commits: 0, statements: 0 }));
  const floors = new Map<number, number>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const clients of IN_FLIGHT) floors.set(clients, (floors.get(clients) ?? 0) + (await insertFloor(url, clients)) / ROUNDS);
    for (const [i, c] of configurations.entries()) {
      const measured = await runEpisodes(url, c.expectation, PER_ROUND[c.inFlight], c.inFlight);
      const total = totals[i] as Measured;
      total.seconds += measured.seconds;
      total.n += measured.n;
      total.commits += measured.commits;
      total.statements += measured.statements;
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
        'floor inserts/s': Math.round(floorRate),
        'episodes / floor': `${(rate / floorRate).toFixed(2)}x`,
      };
    }),
  );
}
