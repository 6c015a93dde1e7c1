import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule, getDataSourceToken } from '@nestjs/typeorm';
import pg from 'pg';
import type { DataSource, EntityManager } from 'typeorm';
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
import {
  takeTransactionStatements,
  watchTransactions,
  type TransactionStatements,
} from '../support/transaction-statements.js';

const IN_FLIGHT = [1, 4, 16] as const;
/** Episodes per configuration and round, by in-flight count (fewer where each takes a round trip alone). */
const PER_ROUND: Record<(typeof IN_FLIGHT)[number], number> = { 1: 250, 4: 500, 16: 1_000 };
const ROUNDS = 2;
/** The host table a transaction step writes to, and the host's orders a host transaction saves. */
const STEP_TABLE = 'bench_tx_rows';
const ORDERS_TABLE = 'bench_host_orders';

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

  /**
   * `k1` with a cluster-wide concurrency limit per key that never binds here (64 per key, 16 keys):
   * what the flow path costs (a throttled insert, then the admission with its claims).
   */
  @Expectation({
    id: 'limited',
    trigger: 'manual',
    concurrency: { limit: 64, key: (p: { i: number }) => p.i % 16 },
  })
  async limited(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }

  /** `k1` of a versioned expectation: the version is recorded with the row its begin inserts. */
  @Expectation({ id: 'versioned', trigger: 'manual', version: 'v1' })
  async versioned(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.i);
  }

  /** `k1` behind a patch: each episode passes the patch fresh, so it journals the marker step. */
  @Expectation({ id: 'patched', trigger: 'manual' })
  async patched(ep: EpisodeContext<{ i: number }>): Promise<void> {
    if (ep.patched('p')) await ep.step('s1', () => ep.trigger.payload.i);
  }

  /** One transaction step: the host's INSERT commits with the step's checkpoint. */
  @Expectation({ id: 'tx', trigger: 'manual' })
  async tx(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.transaction('t', (manager: EntityManager) =>
      manager.query(`INSERT INTO ${STEP_TABLE} (i) VALUES ($1)`, [ep.trigger.payload.i]),
    );
  }
}

interface Measured extends Counts {
  seconds: number;
  n: number;
  /** This process's CPU time (user + system) over the measured run, in microseconds: the library's own cost, steadier than a rate. */
  cpuMicros: number;
  /** Trigger in host transaction: from the host's COMMIT answered to the episode done, in ms. */
  commitToDoneMs: number[];
  /** The measured transactions that named the line's host table (none for plain steps). */
  inTransaction: TransactionStatements;
}

const INTEGRITY = { keyId: 'bench', keys: { bench: 'bench-integrity-secret-0123456789abcdef' } };
/** The integrity pair: alternating batches on a node with the option and one without, at 16 in flight. */
const PAIR = { batches: 20, perBatch: 200, inFlight: 16 };

/**
 * What one line runs: K = 1 or 5 plain steps; `transaction-step`, one `ep.transaction` inserting a
 * host row; `trigger-in-host-tx`, the host's TypeORM transaction inserting an order and triggering
 * the 1-step episode with `{ manager }`, then committing (the episode runs after the commit);
 * `limited`, the 1-step episode of an expectation with `concurrency` (admitted in its insert's
 * statement, or later by the flow queue); `versioned`, of an expectation with a `version`;
 * `patched`, behind `ep.patched` (a marker step before it).
 */
type Line =
  'k1' | 'k5' | 'transaction-step' | 'trigger-in-host-tx' | 'limited' | 'versioned' | 'patched';
const LINES: Line[] = [
  'k1',
  'k5',
  'transaction-step',
  'trigger-in-host-tx',
  'limited',
  'versioned',
  'patched',
];
const LABEL: Record<Line, string> = {
  k1: '1 step',
  limited: '1 step, limited',
  versioned: '1 step, versioned',
  patched: '1 step, patched',
  k5: '5 steps',
  'transaction-step': 'transaction-step',
  'trigger-in-host-tx': 'trigger-in-host-tx',
};
/** The host table whose transactions a line counts at the driver. */
const HOST_TABLE: Partial<Record<Line, string>> = {
  'transaction-step': STEP_TABLE,
  'trigger-in-host-tx': ORDERS_TABLE,
};

interface Configuration {
  line: Line;
  inFlight: number;
}

/** A node of the bench actor on its own pool, claims on. */
export async function bootNode(
  url: string,
  cyclium: CycliumOptions,
): Promise<INestApplicationContext> {
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

/**
 * Runs `count` episodes of `line` on `app`, at most `inFlight` at once. For a trigger in the host's
 * transaction, `latencies` gets each episode's time from its host COMMIT answered to done.
 */
export async function runMany(
  app: INestApplicationContext,
  line: Line,
  count: number,
  inFlight: number,
  latencies: number[] = [],
): Promise<void> {
  const episodes = app.get(Episodes);
  if (line !== 'trigger-in-host-tx') {
    const expectation = line === 'transaction-step' ? 'tx' : line;
    return keepInFlight(
      count,
      inFlight,
      async (i) => {
        const result = await episodes.trigger('bench', expectation, { i });
        // A limited trigger starts in its insert's statement when a slot and the limits allow it,
        // else it waits `throttled` (answered `queued`) for the flow queue.
        const accepted = line === 'limited' ? ['started', 'queued'] : ['started'];
        if (!accepted.includes(result.status)) throw new Error(`episode ${i} was ${result.status}`);
      },
      (done) => onCyclium('episode.completed', done),
    );
  }
  const dataSource = app.get<DataSource>(getDataSourceToken());
  // Either may come first: the NOTIFY is delivered at commit, before the COMMIT's answer is read.
  const committed = new Map<string, number>();
  const finished = new Map<string, number>();
  await keepInFlight(
    count,
    inFlight,
    async (i) => {
      const result = await dataSource.transaction(async (manager) => {
        await manager.query(`INSERT INTO ${ORDERS_TABLE} (i) VALUES ($1)`, [i]);
        return episodes.trigger('bench', 'k1', { i }, { manager });
      });
      if (result.status !== 'on_commit') throw new Error(`episode ${i} was ${result.status}`);
      committed.set(result.episode.id, performance.now());
    },
    (done) =>
      onCyclium('episode.completed', (event) => {
        finished.set(event.episodeId, performance.now());
        done();
      }),
  );
  for (const [id, at] of committed) {
    const end = finished.get(id);
    if (end !== undefined) latencies.push(end - at);
  }
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
    commitToDoneMs: [],
    inTransaction: { transactions: 0, statements: 0, host: 0 },
  });
  return { off: measured(sides.off), on: measured(sides.on) };
}

/** N episodes of one line, at most `inFlight` at once, on one node with claims on. */
async function runEpisodes(
  url: string,
  { line, inFlight }: Configuration,
  n: number,
): Promise<Measured> {
  const app = await bootNode(url, { nodeIdentity: `bench-${line}-${inFlight}` });
  const table = HOST_TABLE[line];
  await runMany(app, line, WARM_UP, inFlight);
  await settleIdleStats();
  if (table) takeTransactionStatements(table);
  const commitToDoneMs: number[] = [];
  const before = await countsSoFar(url);
  const started = performance.now();
  const cpu = process.cpuUsage();
  await runMany(app, line, n, inFlight, commitToDoneMs);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const inTransaction = table
    ? takeTransactionStatements(table)
    : { transactions: 0, statements: 0, host: 0 };
  // Closing flushes the bus's last wake-up and ends every backend, so their statistics are in.
  await app.close();
  await settleStats();
  return {
    seconds,
    n,
    cpuMicros: used.user + used.system,
    commitToDoneMs,
    inTransaction,
    ...since(before, await countsSoFar(url)),
  };
}

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))];

/**
 * The rounds of `lines` at 1, 4 and 16 in flight next to the floor, and their table; then, for
 * the lines that write in a transaction, what those transactions sent (counted at the driver).
 */
async function measureLines(url: string, lines: Line[]): Promise<void> {
  const source = await statementSource(url);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const table of [STEP_TABLE, ORDERS_TABLE])
      await client.query(`CREATE TABLE IF NOT EXISTS ${table} (i int NOT NULL)`);
  } finally {
    await client.end();
  }
  watchTransactions([STEP_TABLE, ORDERS_TABLE]);
  const configurations: Configuration[] = IN_FLIGHT.flatMap((inFlight) =>
    lines.map((line) => ({ line, inFlight })),
  );
  const totals: Measured[] = configurations.map(() => ({
    seconds: 0,
    n: 0,
    commits: 0,
    statements: 0,
    cpuMicros: 0,
    commitToDoneMs: [],
    inTransaction: { transactions: 0, statements: 0, host: 0 },
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
      total.commitToDoneMs.push(...measured.commitToDoneMs);
      total.inTransaction.transactions += measured.inTransaction.transactions;
      total.inTransaction.statements += measured.inTransaction.statements;
      total.inTransaction.host += measured.inTransaction.host;
    }
  }
  printTable(
    `episodes: claims on, durable bus; statements counted by ${source}. ` +
      `trigger-in-host-tx: each episode is one host transaction (INSERT + trigger with ` +
      `{ manager }) committed, so episodes/s is host commits/s; commit→done from its COMMIT answered`,
    configurations.map((c, i) => {
      const total = totals[i] as Measured;
      const rate = total.n / total.seconds;
      const floorRate = floors.get(c.inFlight) as number;
      const latencies = total.commitToDoneMs;
      return {
        episode: LABEL[c.line],
        'in flight': c.inFlight,
        'episodes/s': Math.round(rate),
        'statements/episode': (total.statements / total.n).toFixed(2),
        'commits/episode': (total.commits / total.n).toFixed(2),
        'node CPU µs/episode': Math.round(total.cpuMicros / total.n),
        'floor inserts/s': Math.round(floorRate),
        'episodes / floor': `${(rate / floorRate).toFixed(2)}x`,
        'commit→done ms p50/p95':
          latencies.length > 0
            ? `${(percentile(latencies, 0.5) as number).toFixed(1)}/` +
              `${(percentile(latencies, 0.95) as number).toFixed(1)}`
            : '',
      };
    }),
  );
  const written = configurations
    .map((c, i) => ({ c, counted: (totals[i] as Measured).inTransaction }))
    .filter(({ counted }) => counted.transactions > 0);
  if (written.length === 0) return;
  printTable(
    'in the transaction (counted at pg.Client.query, one call = one round trip): every statement ' +
      "from START TRANSACTION to COMMIT = the host's + the library's + START TRANSACTION + COMMIT",
    written.map(({ c, counted }) => ({
      episode: LABEL[c.line],
      'in flight': c.inFlight,
      transactions: counted.transactions,
      'statements/transaction': (counted.statements / counted.transactions).toFixed(2),
      "host's": (counted.host / counted.transactions).toFixed(2),
      "library's": ((counted.statements - counted.host) / counted.transactions - 2).toFixed(2),
    })),
  );
}

/**
 * Episodes per second, statements and commits per episode for K = 1 and K = 5 steps, one
 * transaction step, and the 1-step episode triggered in the host's transaction, at 1, 4 and 16 in
 * flight (claims on, the durable bus), each next to the bare single-insert floor at the same
 * concurrency; then at 16 in flight once more with the `integrity` option on (signed checkpoints
 * and lifecycle events). Rounds are interleaved (floor, then every configuration) and summed, so
 * drift on a shared machine hits them all alike. Statements and commits include the bus's
 * wake-ups and reads.
 */
export async function episodesBench(url: string): Promise<void> {
  await measureLines(url, LINES);
  await integrityBench(url);
}

/** The two transaction lines alone (`npm run bench -- transactions`); `episodes` has them too. */
export async function transactionsBench(url: string): Promise<void> {
  await measureLines(url, ['transaction-step', 'trigger-in-host-tx']);
}

/**
 * The 1-step episode without and with a concurrency limit (`npm run bench -- flow`); `episodes`
 * has both.
 */
export async function flowBench(url: string): Promise<void> {
  await measureLines(url, ['k1', 'limited']);
}

/**
 * The 1-step episode without and with a version, and behind a patch (`npm run bench -- versions`);
 * `episodes` has them too.
 */
export async function versionsBench(url: string): Promise<void> {
  await measureLines(url, ['k1', 'versioned', 'patched']);
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
