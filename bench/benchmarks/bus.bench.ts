import { PostgresBus } from '@cyclium/nestjs/adapters';
import type { Bus } from '@cyclium/nestjs';
import pg from 'pg';
import { countsSoFar, settleStats, since } from '../support/counters.js';
import { insertEventsBehindUndispatched } from '../support/history-fixtures.js';
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
      : new PostgresBus(pool, () => ({ connectionString: url }), {
          channel,
          publisher: () => 'bench',
        });
  return { bus, pool };
}

/**
 * One round: `publishers` loops each awaiting its publish for DURATION_MS on one node, three other
 * nodes subscribed. Published/s counts acknowledgements; delivered/s runs until the last of the
 * three subscribers has every event. Commits are pg_stat_database.xact_commit over the round,
 * listeners' reads included (they are flushed when the listeners disconnect at the end).
 */
async function round(
  url: string,
  transport: Transport,
  publishers: number,
): Promise<{ published: number; delivered: number; commits: number }> {
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
  while (counts.some((c) => c < sent) && performance.now() < waitUntil)
    await new Promise((r) => setTimeout(r, 2));
  const deliveredIn = performance.now() - started;
  if (counts.some((c) => c < sent))
    throw new Error(`${transport}: subscribers got ${counts.join('/')} of ${sent}`);

  await Promise.all([publisher, ...subscribers].map((n) => n.bus.stop()));
  await Promise.all([publisher, ...subscribers].map((n) => n.pool.end()));
  await settleStats();
  const { commits } = since(before, await countsSoFar(url));
  return {
    published: sent / (publishedIn / 1000),
    delivered: sent / (deliveredIn / 1000),
    commits: commits / sent,
  };
}

/**
 * Events per second published and delivered to three subscribers, by the durable bus and by the
 * NOTIFY-only transport it replaced, at 1, 4 and 16 concurrent publishers, next to the bare
 * single-row insert floor at the same concurrency, all in one run on one database.
 */
export async function busBench(url: string): Promise<void> {
  const rows = [];
  const floorPool = new pg.Pool({ connectionString: url, max: 16 });
  // pool.end() resolves before its clients' sockets close: the server stopping right after must not crash the run.
  floorPool.on('error', () => undefined);
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
    printTable(
      `bus: each publisher awaits every publish for ${DURATION_MS / 1000} s; ${SUBSCRIBERS} subscriber nodes`,
      rows,
    );
    const appendRate = Math.max(
      ...rows.filter((r) => r.transport === 'durable (PostgresBus)').map((r) => r['published/s']),
    );
    printTable(
      'bus retention: 500,000 expired events behind 1,000 a consumer has not dispatched, pruned by passes of the timer',
      [{ ...(await pruneRate(url, floorPool)), 'best append rate/s (above)': appendRate }],
    );
  } finally {
    await floorPool.end();
  }
}

const PRUNED = 500_000;

/** Fills the log with PRUNED expired events behind 1,000 kept ones, then runs retention passes until they are gone. */
async function pruneRate(url: string, pool: pg.Pool): Promise<Record<string, string | number>> {
  const channel = 'bench_prune';
  // The rounds above left young events at the lowest ids: a pass stops where rows turn young, as it should.
  await pool.query(`TRUNCATE cyclium_events`);
  await insertEventsBehindUndispatched(pool, channel, 1_000, PRUNED);
  await pool.query('ANALYZE cyclium_events');
  const bus = new PostgresBus(pool, () => ({ connectionString: url }), {
    channel,
    publisher: () => 'bench',
  });
  const started = performance.now();
  let passes = 0;
  let deleted = 0;
  for (let pass = await bus.pruneNow(); pass > 0; pass = await bus.pruneNow()) {
    passes++;
    deleted += pass;
  }
  const seconds = (performance.now() - started) / 1000;
  await pool.query(`DELETE FROM cyclium_bus_positions WHERE channel = $1`, [channel]);
  await pool.query(`DELETE FROM cyclium_events WHERE channel = $1`, [channel]);
  return {
    deleted,
    'passes (5 s budget each)': passes,
    'seconds pruning': seconds.toFixed(1),
    'pruned/s': Math.round(deleted / seconds),
  };
}
