import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CycliumModule, WorkClaims, type ClaimHold } from '@cyclium/nestjs';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { printTable, throughput } from '../support/measure.js';

const DURATION_MS = 3_000;
const CLIENTS = [1, 4, 16];
const LIVE_CLAIMS = 10_000;

/**
 * Counts the renewal statements an adapter sends and how many claims each one carried, so "one
 * statement per node per tick" is measured, not assumed.
 */
class CountingExecutor {
  readonly batches: number[] = [];
  constructor(private readonly pool: pg.Pool) {}
  query = ((config: pg.QueryConfig) => {
    const keys = config.values?.[2];
    this.batches.push(Array.isArray(keys) ? keys.length : 1);
    return this.pool.query(config);
  }) as unknown as pg.Pool['query'];
}

const ratio = (value: number, floor: number) => `${(value / floor).toFixed(2)}x`;

/**
 * acquire + complete cycles and single-claim renewals per second at 1, 4 and 16 clients, each next
 * to the same number of bare single-row statements (INSERT … ON CONFLICT, then UPDATE) on a
 * two-column table, sent both as plain text and as prepared statements (the adapter prepares its
 * statements, so the second floor is the like-for-like one); then the renewer holding 10,000 live
 * claims, counted per tick.
 */
export async function claimsBench(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 16 });
  pool.on('error', () => undefined);
  try {
    await pool.query('CREATE TABLE IF NOT EXISTS bench_floor (k text PRIMARY KEY, v int NOT NULL)');
    const claims = new PostgresClaims(pool);
    const cycles = [];
    const renewals = [];
    for (const clients of CLIENTS) {
      const run = `${clients}-${Date.now()}`;
      const floorCycle = await throughput(pool, clients, DURATION_MS, async (c, i) => {
        await c.query('INSERT INTO bench_floor (k, v) VALUES ($1, 1) ON CONFLICT (k) DO NOTHING', [
          `f:${run}:${i}`,
        ]);
        await c.query('UPDATE bench_floor SET v = 2 WHERE k = $1', [`f:${run}:${i}`]);
      });
      const preparedFloorCycle = await throughput(pool, clients, DURATION_MS, async (c, i) => {
        const k = `p:${run}:${i}`;
        await c.query({
          name: 'floor_insert',
          text: 'INSERT INTO bench_floor (k, v) VALUES ($1, 1) ON CONFLICT (k) DO NOTHING',
          values: [k],
        });
        await c.query({
          name: 'floor_update',
          text: 'UPDATE bench_floor SET v = 2 WHERE k = $1',
          values: [k],
        });
      });
      const claimCycle = await throughput(pool, clients, DURATION_MS, async (c, i) => {
        const adapter = new PostgresClaims(c);
        const result = await adapter.acquire(`c:${run}:${i}`, 'bench-node', { leaseSeconds: 60 });
        if (result.status !== 'acquired') throw new Error(`acquire answered ${result.status}`);
        await adapter.complete(`c:${run}:${i}`, 'bench-node', result.claim.fence);
      });
      cycles.push({
        clients,
        'acquire+complete/s': Math.round(claimCycle),
        'floor INSERT+UPDATE/s': Math.round(floorCycle),
        ratio: ratio(claimCycle, floorCycle),
        'prepared floor/s': Math.round(preparedFloorCycle),
        'ratio (prepared)': ratio(claimCycle, preparedFloorCycle),
      });

      // Renewals: each client keeps re-renewing its own 64 live claims, next to bare UPDATEs of 64 rows.
      const live = Array.from({ length: clients * 64 }, (_, i) => `r:${run}:${i}`);
      for (const key of live) {
        await claims.acquire(key, 'bench-node', { leaseSeconds: 60 });
        await pool.query(
          'INSERT INTO bench_floor (k, v) VALUES ($1, 0) ON CONFLICT (k) DO NOTHING',
          [key],
        );
      }
      const floorRenew = await throughput(pool, clients, DURATION_MS, (c, i) =>
        c.query('UPDATE bench_floor SET v = v + 1 WHERE k = $1', [live[i % live.length]]),
      );
      const preparedFloorRenew = await throughput(pool, clients, DURATION_MS, (c, i) =>
        c.query({
          name: 'floor_bump',
          text: 'UPDATE bench_floor SET v = v + 1 WHERE k = $1',
          values: [live[i % live.length]],
        }),
      );
      const claimRenew = await throughput(pool, clients, DURATION_MS, async (c, i) => {
        const outcome = await new PostgresClaims(c).renew(
          live[i % live.length],
          'bench-node',
          60,
          1,
        );
        if (outcome !== 'ok') throw new Error('renew answered not_owner');
      });
      renewals.push({
        clients,
        'renew/s': Math.round(claimRenew),
        'floor UPDATE/s': Math.round(floorRenew),
        ratio: ratio(claimRenew, floorRenew),
        'prepared floor/s': Math.round(preparedFloorRenew),
        'ratio (prepared)': ratio(claimRenew, preparedFloorRenew),
      });
    }
    printTable(
      'claims: acquire + complete cycles (2 statements each) vs bare INSERT … ON CONFLICT + UPDATE',
      cycles,
    );
    printTable('claims: single-claim renewals vs bare single-row UPDATE', renewals);
    await renewerAtScale(url, pool);
  } finally {
    await pool.end();
  }
}

/** The real renewer, in a Nest app, holding 10,000 live claims: statements and time per tick. */
async function renewerAtScale(url: string, pool: pg.Pool): Promise<void> {
  const counter = new CountingExecutor(pool);
  const adapter = new PostgresClaims(pool, counter);
  const leaseSeconds = 3;

  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 16 } }),
      CycliumModule.forRoot({
        nodeIdentity: 'bench-renewer',
        workClaims: adapter,
        workClaimsLeaseSeconds: leaseSeconds,
      }),
    ],
  })
  class BenchModule {}

  const app = await NestFactory.createApplicationContext(BenchModule, {
    logger: ['error', 'warn'],
  });
  await app.init();
  try {
    const gate = app.get(WorkClaims);
    const keys = Array.from({ length: LIVE_CLAIMS }, (_, i) => `scale:${Date.now()}:${i}`);
    const holds: ClaimHold[] = [];
    for (let i = 0; i < keys.length; i += 16) {
      const results = await Promise.all(
        keys.slice(i, i + 16).map((key) => gate.acquire(key, 'bench-renewer')),
      );
      results.forEach((result, j) => holds.push(gate.hold(keys[i + j], result)));
    }
    const tickMs = (leaseSeconds * 1000) / 3;
    const window = 3 * tickMs + tickMs / 2;
    const before = counter.batches.length;
    const started = performance.now();
    const lease = async () =>
      (
        await pool.query(
          `SELECT min(lease_until) AS oldest FROM cyclium_work_claims WHERE owner_node = 'bench-renewer'`,
        )
      ).rows[0].oldest as Date;
    // Let the renewer's own timer tick for three and a half intervals, then count what it sent.
    await new Promise((r) => setTimeout(r, window));
    const elapsed = performance.now() - started;
    const batches = counter.batches.slice(before);
    const renewedUntil = await lease();
    const lost = holds.filter((h) => h.lost).length;
    printTable(
      `claims: the node's renewer holding ${LIVE_CLAIMS.toLocaleString('en')} live claims (lease ${leaseSeconds} s, tick every lease / 3)`,
      [
        {
          'live claims': LIVE_CLAIMS,
          'window (ms)': Math.round(elapsed),
          'ticks expected': `${Math.floor(elapsed / tickMs)}-${Math.ceil(elapsed / tickMs)}`,
          'renewal statements sent': batches.length,
          'claims per statement': batches.join(', '),
          'claims lost': lost,
          'oldest lease now ends': renewedUntil.toISOString(),
        },
      ],
    );
    await timeOneBatch(adapter, keys);
  } finally {
    await app.close();
  }
}

/** How long the one statement of a tick takes for all 10,000, next to 10,000 single renewals' worth of time at the measured rate. */
async function timeOneBatch(adapter: PostgresClaims, keys: string[]): Promise<void> {
  const held = keys.map((key) => ({ key, fence: 1 }));
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    const renewed = await adapter.renewMany('bench-renewer', held, 60);
    samples.push(performance.now() - started);
    if (renewed.length !== keys.length)
      throw new Error(`renewMany kept ${renewed.length} of ${keys.length}`);
  }
  samples.sort((a, b) => a - b);
  printTable('claims: one renewMany statement for all live claims (5 samples)', [
    {
      claims: keys.length,
      'min ms': samples[0].toFixed(1),
      'median ms': samples[2].toFixed(1),
      'max ms': samples[4].toFixed(1),
    },
  ]);
}
