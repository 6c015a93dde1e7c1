import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Actor, CycliumModule, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { printTable } from '../support/measure.js';

const SAMPLES = 40;
const POLL_MS = 1_000;

/** When each sample's first step began, by the process's monotonic clock. */
const firstStepAt = new Map<number, number>();
const waiting = new Map<number, () => void>();

@Injectable()
@Actor({ id: 'dispatch_bench' })
class DispatchActor {
  @Expectation({ id: 'job', trigger: 'manual' })
  async job(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('first', () => {
      const { i } = ep.trigger.payload;
      firstStepAt.set(i, performance.now());
      waiting.get(i)?.();
    });
  }
}

async function node(
  url: string,
  identity: string,
  mode: 'full' | 'trigger_only',
  stackSlug: string,
): Promise<INestApplicationContext> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, name: identity }),
      CycliumModule.forRoot({
        dataSource: identity,
        nodeIdentity: identity,
        mode,
        stackSlug,
        workClaims: 'postgres',
        triggerPollIntervalMs: POLL_MS,
      }),
    ],
    providers: [DispatchActor],
  })
  class NodeModule {}
  const app = await NestFactory.createApplicationContext(NodeModule, { logger: ['error', 'warn'] });
  await app.init();
  return app;
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;

/**
 * Trigger-only mode: from `Episodes.trigger` on a trigger-only node (the request committed) to the
 * first step running on a full node, one sample at a time. With the wake-up, both nodes share a
 * bus channel and the deferring node's NOTIFY sends the full node polling at once; without it,
 * they sit on different stacks (different channels) and only the poll interval brings it.
 */
export async function dispatchBench(url: string): Promise<void> {
  const rows = [];
  for (const [label, fullStack] of [
    ['with the NOTIFY wake-up', 'a'],
    ['poll only (no wake-up)', 'b'],
  ] as const) {
    const full = await node(url, `dispatch-full-${fullStack}`, 'full', fullStack);
    const deferring = await node(url, `dispatch-trigger-${fullStack}`, 'trigger_only', 'a');
    const latencies: number[] = [];
    try {
      for (let i = 0; i < SAMPLES; i++) {
        const id = fullStack === 'a' ? i : i + SAMPLES;
        const ran = new Promise<void>((resolve) => waiting.set(id, resolve));
        const sent = performance.now();
        const result = await deferring.get(Episodes).trigger('dispatch_bench', 'job', { i: id });
        if (result.status !== 'deferred') throw new Error(`sample ${i} was ${result.status}`);
        await ran;
        latencies.push((firstStepAt.get(id) as number) - sent);
      }
    } finally {
      await deferring.close();
      await full.close();
    }
    latencies.sort((x, y) => x - y);
    rows.push({
      path: label,
      samples: SAMPLES,
      'p50 ms': percentile(latencies, 50).toFixed(1),
      'p99 ms': percentile(latencies, 99).toFixed(1),
      'poll interval ms': POLL_MS,
    });
  }
  printTable('dispatch: a trigger on a trigger-only node to its first step on a full node', rows);
}
