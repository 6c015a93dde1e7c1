import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  Actor,
  Bus,
  CycliumModule,
  Expectation,
  onCyclium,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { countsSoFar, settleStats, since, statementSource } from '../support/counters.js';
import { insertFloor, keepInFlight, printTable } from '../support/measure.js';

const IN_FLIGHT = [1, 4, 16] as const;
const PER_ROUND: Record<(typeof IN_FLIGHT)[number], number> = { 1: 250, 4: 500, 16: 1_000 };
const ROUNDS = 2;

@Injectable()
@Actor({ id: 'e2e', maxConcurrentEpisodes: 32 })
class EventActor {
  @Expectation({ id: 'on_event', trigger: { event: 'bench.e2e' } })
  async onEvent(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }
}

async function node(
  url: string,
  identity: string,
  providers: Array<typeof EventActor>,
): Promise<INestApplicationContext> {
  @Module({
    imports: [
      // Two nodes share this process: each DataSource gets a name of its own.
      TypeOrmModule.forRoot({ type: 'postgres', url, name: identity, extra: { max: 20 } }),
      CycliumModule.forRoot({
        nodeIdentity: identity,
        dataSource: identity,
        workClaims: 'postgres',
        jitterMs: 0,
      }),
    ],
    providers,
  })
  class NodeModule {}
  const app = await NestFactory.createApplicationContext(NodeModule, { logger: ['error', 'warn'] });
  await app.init();
  return app;
}

/** `n` events published on one node, each becoming an episode on another, at most `inFlight` unfinished at once. */
async function run(url: string, n: number, inFlight: number) {
  const publisher = await node(url, `e2e-pub-${inFlight}`, []);
  const runner = await node(url, `e2e-run-${inFlight}`, [EventActor]);
  // No warm-up here, unlike the episodes bench: a listening connection reports the commits of the
  // NOTIFYs it read only when it next runs a statement or closes, so a warm-up's would be counted.
  await settleStats();
  const before = await countsSoFar(url);
  const bus = publisher.get(Bus);
  const started = performance.now();
  await keepInFlight(
    n,
    inFlight,
    (i) => bus.publish('bench.e2e', { i }),
    (done) => onCyclium('episode.completed', done),
  );
  const seconds = (performance.now() - started) / 1000;
  await Promise.all([publisher.close(), runner.close()]);
  await settleStats();
  return { seconds, n, ...since(before, await countsSoFar(url)) };
}

/**
 * End to end across nodes: an event published on one node (the durable bus) becomes a one-step
 * episode on another, at 1, 4 and 16 in flight, next to the bare single-insert floor at the same
 * concurrency. Statements and commits count both nodes and the bus.
 */
export async function e2eBench(url: string): Promise<void> {
  const source = await statementSource(url);
  const totals = IN_FLIGHT.map(() => ({ seconds: 0, n: 0, commits: 0, statements: 0 }));
  const floors = IN_FLIGHT.map(() => 0);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, inFlight] of IN_FLIGHT.entries()) {
      floors[i] = (floors[i] as number) + (await insertFloor(url, inFlight)) / ROUNDS;
      const measured = await run(url, PER_ROUND[inFlight], inFlight);
      const total = totals[i] as (typeof totals)[number];
      total.seconds += measured.seconds;
      total.n += measured.n;
      total.commits += measured.commits;
      total.statements += measured.statements;
    }
  }
  printTable(
    `e2e: published on one node, run on another (claims on, durable bus); statements counted by ${source}`,
    IN_FLIGHT.map((inFlight, i) => {
      const total = totals[i] as (typeof totals)[number];
      const rate = total.n / total.seconds;
      return {
        'in flight': inFlight,
        'episodes/s': Math.round(rate),
        'statements/episode': (total.statements / total.n).toFixed(2),
        'commits/episode': (total.commits / total.n).toFixed(2),
        'floor inserts/s': Math.round(floors[i] as number),
        'episodes / floor': `${(rate / (floors[i] as number)).toFixed(2)}x`,
      };
    }),
  );
}
