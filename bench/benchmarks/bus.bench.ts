import { PostgresBus } from '@cyclium/nestjs/adapters';
import type { Bus } from '@cyclium/nestjs';
import pg from 'pg';
import { countsSoFar, settleStats, since } from '../support/counters.js';
import { bareInsertFloor, printTable } from '../support/measure.js';
import { NotifyOnlyBus } from '../support/notify-only-bus.js';

const DURATION_MS = 3_000;
const PUBLISHERS = [1, 4, 16];
const SUBSCRIBERS = 3;

type Transport = 'durable (PostgresBus)' | 'NOTIFY only';

interface Node {
  bus: Bus & { start(): Promise<void>; stop(): Promise<void> };
  pool: pg.Pool;
}

function node(url: string, transport: Transport, channel: string): Node {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  const bus =
    transport === 'NOTIFY only'
      ? new NotifyOnlyBus(pool, url, channel)
      : new PostgresBus(pool, () => ({ connectionString: url }), { channel, publisher: () => 'bench' });
  return { bus, pool };
}

/**
 * One round: `publishers` loops each awaiting its publish for DURATION_MS on one node, three other
 * nodes subscribed. Published/s counts acknowledgements; delivered/s runs until the last of the
 * three subscribers has every event. Commits are pg_stat_database.xact_commit over the round,
 * listeners' reads included (they are flushed when the listeners disconnect at the end).
 */
async function round(url: string, transport: Transport, publishers: number): Promise<{ published: number; delivered: number; commits: number }> {
  const channel = `bench_${transport === 'NOTIFY only' ? 'n' : 'd'}_${publishers}_${Date.now()}`;
  const publisher = node(url, transport, channel);
  const subscribers = Array.from({ length: SUBSCRIBERS }, () => node(url, transport, channel));
  const counts = subscribers.map(() => 0);
  subscribers.forEach((s, i) => s.bus.subscribe('bench', () => void counts[i]++));
  await Promise.all([publisher, ...subscribers].map((n) => n.bus.start()));

  await settleStats();
  const before = await countsSoFar(url);
  let sent = 0;
  const started = performance.now();
  const deadline = started + DURATION_MS;
  await Promise.all(
    Array.from({ length: publishers }, async (_, p) => {
      for (let i = 0; performance.now() < deadline; i++) {
        await publisher.bus.publish('bench', { p, i });
        sent++;
      }
    }),
  );
  const publishedIn = performance.now() - started;
  const waitUntil = performance.now() + 30_000;
  while (counts.some((c) => c < sent) && performance.now() < waitUntil) await new Promise((r) => setTimeout(r, 2));
  const deliveredIn = performance.now() - started;
  if (counts.some((c) => c < sent)) throw new Error(`${transport}: subscribers got ${counts.join('/')} of ${sent}`);

  await Promise.all([publisher, ...subscribers].map((n) => n.bus.stop()));
  await Promise.all([publisher, ...subscribers].map((n) => n.pool.end()));
  await settleStats();
  const { commits } = since(before, await countsSoFar(url));
  return { published: sent / (publishedIn / 1000), delivered: sent / (deliveredIn / 1000), commits: commits / sent };
}

/**
 * Events per second published and delivered to three subscribers, by the durable bus and by the
 * NOTIFY-only transport it replaced, at 1, 4 and 16 concurrent publishers, next to the bare
 * single-row insert floor at the same concurrency, all in one run on one database.
 */
export async function busBench(url: string): Promise<void> {
  const rows = [];
  const floorPool = new pg.Pool({ connectionString: url, max: 16 });
  try {
    for (const publishers of PUBLISHERS) {
      const floor = await bareInsertFloor(floorPool, publishers, DURATION_MS);
      for (const transport of ['durable (PostgresBus)', 'NOTIFY only'] as const) {
        const measured = await round(url, transport, publishers);
        rows.push({
          publishers,
          transport,
          'published/s': Math.round(measured.published),
          'delivered to all 3/s': Math.round(measured.delivered),
          'floor inserts/s': Math.round(floor),
          'delivered / floor': `${(measured.delivered / floor).toFixed(2)}x`,
          'commits/event': measured.commits.toFixed(2),
        });
      }
    }
  } finally {
    await floorPool.end();
  }
  printTable(`bus: each publisher awaits every publish for ${DURATION_MS / 1000} s; ${SUBSCRIBERS} subscriber nodes`, rows);
}
