/**
 * The worker of `npm run bench -- arrivals`, a process of its own: one node with claims on and
 * the durable bus, every option at its default, hosting a manual 1-step expectation. Its parent
 * sends `{ kind: 'trigger', unit, ids }` over IPC (one unit per id, started at once: an episode, or
 * the three-commit floor on a pool of the worker's own) and hears back
 * `{ kind: 'done', id, doneAt }` with the absolute time each was seen `done`, so the generator's
 * timers never share this event loop.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import pg from 'pg';
import {
  Actor,
  CycliumModule,
  Episodes,
  Expectation,
  onCyclium,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { clock, type ArrivalsReply, type ArrivalsRequest } from './arrivals-protocol.js';

@Injectable()
@Actor({ id: 'arrivals', maxConcurrentEpisodes: 256 })
class ArrivalsActor {
  @Expectation({ id: 'k1', trigger: 'manual' })
  async k1(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }
}

async function main(): Promise<void> {
  const url = process.env.ARRIVALS_DATABASE_URL as string;
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 20 }, logging: false }),
      CycliumModule.forRoot({
        nodeIdentity: 'arrivals-worker',
        workClaims: 'postgres',
        jitterMs: 0,
      }),
    ],
    providers: [ArrivalsActor],
  })
  class ArrivalsModule {}
  const app = await NestFactory.createApplicationContext(ArrivalsModule, {
    logger: ['error', 'warn'],
  });
  await app.init();
  const episodes = app.get(Episodes);
  const send = (reply: ArrivalsReply) => process.send?.(reply);

  // Episode id → what to do when it is done (completions can be heard before trigger() returns).
  const waiting = new Map<string, (doneAt: number) => void>();
  const early = new Map<string, number>();
  onCyclium('episode.completed', (event) => {
    const doneAt = clock();
    const waiter = waiting.get(event.episodeId);
    if (!waiter) return void early.set(event.episodeId, doneAt);
    waiting.delete(event.episodeId);
    waiter(doneAt);
  });
  const run = async (i: number): Promise<number> => {
    const result = await episodes.trigger('arrivals', 'k1', { i });
    if (result.status !== 'started' && result.status !== 'queued')
      throw new Error(`episode ${i} was ${result.status}`);
    const id = result.episode.id;
    const doneAt = early.get(id);
    if (doneAt !== undefined) {
      early.delete(id);
      return doneAt;
    }
    return new Promise((resolve) => waiting.set(id, resolve));
  };

  const floorPool = new pg.Pool({ connectionString: url, max: 20 });
  floorPool.on('error', () => undefined);
  await floorPool.query(
    'CREATE TABLE IF NOT EXISTS bench_arrivals_floor (id int PRIMARY KEY, v int NOT NULL)',
  );
  await floorPool.query('TRUNCATE bench_arrivals_floor');
  const floor = async (i: number): Promise<number> => {
    const client = await floorPool.connect();
    try {
      await client.query({
        name: 'floor_insert',
        text: 'INSERT INTO bench_arrivals_floor (id, v) VALUES ($1, 0)',
        values: [i],
      });
      await client.query({
        name: 'floor_update',
        text: 'UPDATE bench_arrivals_floor SET v = $2 WHERE id = $1',
        values: [i, 1],
      });
      await client.query({
        name: 'floor_update',
        text: 'UPDATE bench_arrivals_floor SET v = $2 WHERE id = $1',
        values: [i, 2],
      });
    } finally {
      client.release();
    }
    return clock();
  };

  process.on('message', (request: ArrivalsRequest) => {
    for (const id of request.ids) {
      (request.unit === 'floor' ? floor(id) : run(id)).then(
        (doneAt) => send({ kind: 'done', id, doneAt }),
        (error: unknown) => send({ kind: 'failed', id, reason: String(error) }),
      );
    }
  });
  process.once(
    'disconnect',
    () => void Promise.all([app.close(), floorPool.end()]).then(() => process.exit(0)),
  );
  send({ kind: 'ready' });
}

main().catch((error: unknown) => {
  process.stderr.write(`arrivals worker: ${String(error)}\n`);
  process.exit(1);
});
