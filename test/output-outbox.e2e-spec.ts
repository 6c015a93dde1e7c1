import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, Logger, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  NodeIdentity,
  OutputAdapter,
  type Convergence,
  type CycliumOptions,
  type DeliveryContext,
  type EpisodeContext,
  type OutputDeliverer,
  type OutputProposal,
} from '@cyclium/nestjs';
import type { CycliumOutput } from '@cyclium/nestjs/entities';
import { OutputStore } from '../libs/cyclium/src/outputs/output-store.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Every call any adapter in this file got, in order. */
interface Call {
  node: string;
  type: string;
  key: string;
  attempt: number;
  at: number;
  signal: AbortSignal;
}
const calls: Call[] = [];
const callsOf = (key: string) => calls.filter((c) => c.key === key);

/** What an adapter does, from the output's payload. */
interface Behaviour {
  /** Throw on this many calls for the key before succeeding. */
  failTimes?: number;
  /** Throw on every call. */
  alwaysFail?: boolean;
  /** Never settle, whatever the signal says. */
  hang?: boolean;
  /** Wait this long (aborting with the signal) before succeeding. */
  ms?: number;
  /** Wait on this node until the signal aborts. */
  holdOn?: string;
}

@Injectable()
@Actor({ id: 'outbox', maxConcurrentEpisodes: 5 })
class OutboxActor {
  @Expectation({ id: 'emit', trigger: 'manual' })
  async emit(ep: EpisodeContext<{ outputs: OutputProposal[] }>): Promise<Convergence> {
    return { outputs: ep.trigger.payload.outputs };
  }
}

function until(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) =>
    signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
  );
}

/** One adapter class per type; the behaviour comes from the payload. */
abstract class ScriptedAdapter implements OutputDeliverer<Behaviour> {
  constructor(private readonly identity: NodeIdentity) {}

  async deliver(
    output: CycliumOutput & { payload: Behaviour },
    context: DeliveryContext,
  ): Promise<unknown> {
    const node = this.identity.name();
    const before = callsOf(context.idempotencyKey).length;
    calls.push({
      node,
      type: output.type,
      key: context.idempotencyKey,
      attempt: context.attempt,
      at: performance.now(),
      signal: context.signal,
    });
    const { failTimes = 0, alwaysFail, hang, ms, holdOn } = output.payload;
    if (alwaysFail) throw new Error('the receiver said no');
    if (before < failTimes) throw new Error(`refused call ${before + 1}`);
    if (hang) return new Promise(() => undefined);
    if (holdOn === node) await until(context.signal);
    if (ms) await Promise.race([new Promise((r) => setTimeout(r, ms)), until(context.signal)]);
    return { node };
  }
}

@Injectable()
@OutputAdapter('script')
class ScriptAdapter extends ScriptedAdapter {
  constructor(identity: NodeIdentity) {
    super(identity);
  }
}

@Injectable()
@OutputAdapter('shared')
class SharedAdapter extends ScriptedAdapter {
  constructor(identity: NodeIdentity) {
    super(identity);
  }
}

@Injectable()
@OutputAdapter('hung')
class HungAdapter extends ScriptedAdapter {
  constructor(identity: NodeIdentity) {
    super(identity);
  }
}

const FAST: CycliumOptions = {
  bus: 'local',
  nodeBeatIntervalMs: 150,
  recovery: { onBoot: false },
  deliveryTimeoutMs: 2_000,
  outputMaxAttempts: 3,
  outputRetryBaseMs: 100,
};

describe('outputs are an outbox (claims off)', () => {
  const database = useDatabase(3);
  const apps: INestApplicationContext[] = [];
  const start = async (
    id: string,
    adapters: Array<new (identity: NodeIdentity) => ScriptedAdapter>,
    options: CycliumOptions = {},
  ) => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { ...FAST, ...options, nodeIdentity: id },
      providers: [OutboxActor, ...adapters],
    });
    apps.push(app);
    return app;
  };
  const emit = async (app: INestApplicationContext, outputs: OutputProposal[]) => {
    const result = await app.get(Episodes).trigger('outbox', 'emit', { outputs });
    if (result.status !== 'started') throw new Error(`emit was ${result.status}`);
  };
  const row = async (key: string) =>
    (await database.db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = $1`, [key])).rows[0];
  const ended = (key: string, status: string, timeoutMs = 15_000) =>
    waitFor(
      `output ${key} to be ${status}`,
      async () => ((await row(key))?.status === status ? row(key) : undefined),
      timeoutMs,
    );

  let a: INestApplicationContext;
  let b: INestApplicationContext;
  /** Converges outputs of types it does not host: they wait, unleased, for the nodes that do. */
  let producer: INestApplicationContext;
  beforeAll(async () => {
    a = await start('out-a', [ScriptAdapter, SharedAdapter]);
    b = await start('out-b', [ScriptAdapter, SharedAdapter]);
    producer = await start('out-producer', []);
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
  });
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('a delivery that throws twice and then succeeds ends delivered, with one key across attempts and a growing backoff', async () => {
    await emit(a, [{ type: 'script', key: 'flaky', payload: { failTimes: 2 } }]);
    const done = await ended('flaky', 'delivered');
    expect(done).toMatchObject({ attempts: 3, error: null, lease_owner: null });
    const tries = callsOf('flaky');
    expect(tries.map((c) => c.attempt)).toEqual([1, 2, 3]);
    expect(tries.every((c) => c.key === 'flaky')).toBe(true);
    // 100 ms, then 200 ms at least (the row's next_attempt_at, by the database clock).
    expect(tries[1].at - tries[0].at).toBeGreaterThanOrEqual(90);
    expect(tries[2].at - tries[1].at).toBeGreaterThanOrEqual(190);
  });

  it('a delivery that always throws ends failed with its error after outputMaxAttempts, and a warning names it', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    await emit(a, [{ type: 'script', key: 'broken', payload: { alwaysFail: true } }]);
    const failed = await ended('broken', 'failed');
    expect(failed).toMatchObject({ attempts: 3, error: 'the receiver said no', lease_owner: null });
    expect(callsOf('broken')).toHaveLength(3);
    const warned = warn.mock.calls.map((args) => String(args[0]));
    expect(
      warned.some(
        (message) =>
          message.includes(failed.id) &&
          message.includes('broken') &&
          message.includes('the receiver said no'),
      ),
    ).toBe(true);
  });

  it('a hung adapter is cut at deliveryTimeoutMs: its signal aborts, the attempt counts as failed, and it is retried', async () => {
    const hung = await start('out-hung', [HungAdapter], {
      deliveryTimeoutMs: 300,
      outputMaxAttempts: 2,
    });
    const startedAt = performance.now();
    await emit(hung, [{ type: 'hung', key: 'hung', payload: { hang: true } }]);
    const failed = await ended('hung', 'failed');
    expect(failed.attempts).toBe(2);
    expect(failed.error).toMatch(/within 300 ms \(deliveryTimeoutMs\)/);
    const tries = callsOf('hung');
    expect(tries).toHaveLength(2);
    for (const attempt of tries)
      expect((attempt.signal.reason as Error).name).toBe('DeliveryTimeoutError');
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(600);
  });

  it('the converging node holds the lease: a peer hosting the type never delivers it meanwhile', async () => {
    await emit(a, [{ type: 'shared', key: 'slow-on-a', payload: { ms: 800 } }]);
    await waitFor('the delivery to start', () => callsOf('slow-on-a').length === 1);
    const leased = await row('slow-on-a');
    expect(leased).toMatchObject({ status: 'pending', attempts: 1, lease_owner: 'out-a' });
    await ended('slow-on-a', 'delivered');
    // b beat every 150 ms through those 800 ms without taking it.
    expect(callsOf('slow-on-a').map((c) => c.node)).toEqual(['out-a']);
  });

  it('rows of types only peers host are delivered by them, each once; a type no node hosts waits', async () => {
    const keys = Array.from({ length: 12 }, (_, i) => `shared-${i}`);
    await emit(producer, [
      ...keys.map((key): OutputProposal => ({ type: 'shared', key, payload: { ms: 30 } })),
      { type: 'nobody-hosts-this', key: 'orphan-type', payload: {} },
    ]);
    for (const key of keys) await ended(key, 'delivered');
    for (const key of keys) expect(callsOf(key)).toHaveLength(1);
    expect(keys.filter((key) => !['out-a', 'out-b'].includes(callsOf(key)[0].node))).toEqual([]);
    // Both hosts beat several times meanwhile; nobody took the row nobody can deliver.
    expect(await row('orphan-type')).toMatchObject({
      status: 'pending',
      attempts: 0,
      lease_owner: null,
    });
  });

  it('a row whose last allowed attempt never finished (its lease ran out) ends failed, naming the node that held it', async () => {
    await emit(producer, [{ type: 'parked', key: 'last-try-died', payload: {} }]);
    await ended('last-try-died', 'pending');
    // As a node that died inside its third and last attempt leaves it, once the lease ran out.
    await database.db.query(
      `UPDATE cyclium_outputs SET type = 'shared', attempts = 3, lease_owner = 'out-gone', error = 'earlier failure', next_attempt_at = now()
        WHERE dedupe_key = 'last-try-died'`,
    );
    const failed = await ended('last-try-died', 'failed');
    expect(failed.attempts).toBe(3);
    expect(failed.error).toBe(
      'attempt 3 of 3 never finished: the lease of out-gone ran out (last error: earlier failure)',
    );
    expect(callsOf('last-try-died')).toEqual([]);
  });

  it('a row no episode wrote is failed undelivered, and a forged row under the key an episode will produce gives way to its output', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    const forge = (key: string, episodeId: string) =>
      database.db.query(
        `INSERT INTO cyclium_outputs (episode_id, type, dedupe_key, payload) VALUES ($1, 'script', $2, '{"forged": true}') RETURNING id`,
        [episodeId, key],
      );
    // Both name a finished episode, whose end wrote other rows, not these.
    await emit(producer, [{ type: 'parked', key: 'real-end', payload: {} }]);
    const finished = (await ended('real-end', 'pending')).episode_id as string;
    const stray = (await forge('forged-stray', finished)).rows[0].id as string;
    await forge('forged-ahead', finished);
    await emit(a, [{ type: 'script', key: 'forged-ahead', payload: { ms: 1 } }]);

    const replaced = await ended('forged-ahead', 'delivered');
    expect(replaced.payload).toEqual({ ms: 1 });
    expect(replaced.episode_id).not.toBe(finished);
    expect(callsOf('forged-ahead')).toHaveLength(1);
    const failed = await ended('forged-stray', 'failed');
    expect(failed.error).toBe(`not written by the end of episode ${finished}: not delivered`);
    expect(callsOf('forged-stray')).toEqual([]);
    expect(warn.mock.calls.some((args) => String(args[0]).includes(stray))).toBe(true);
  });

  it('two nodes taking due rows at the same moment never take one row twice (one conditional UPDATE, no work claims)', async () => {
    // Rows of a type no app hosts, so only the takes below touch them.
    const keys = Array.from({ length: 200 }, (_, i) => `race-${i}`);
    await emit(
      producer,
      keys.map((key): OutputProposal => ({ type: 'raced', key, payload: {} })),
    );
    await waitFor(
      'the rows',
      async () =>
        (
          await database.db.query(
            `SELECT count(*)::int AS n FROM cyclium_outputs WHERE type = 'raced'`,
          )
        ).rows[0].n === 200,
    );
    const takenBy = new Map<string, string[]>();
    await Promise.all(
      [a, b].map(async (app, i) => {
        const store = app.get(OutputStore);
        for (;;) {
          const rows = await store.take(`racer-${i}`, ['raced'], 7, 3, 60_000, {
            stack: null,
            env: null,
          });
          if (rows.length === 0) return;
          for (const taken of rows)
            takenBy.set(taken.id, [...(takenBy.get(taken.id) ?? []), `racer-${i}`]);
        }
      }),
    );
    expect(takenBy.size).toBe(200);
    expect([...takenBy.values()].filter((owners) => owners.length > 1)).toEqual([]);
    const { rows } = await database.db.query(
      `SELECT id, lease_owner, attempts FROM cyclium_outputs WHERE type = 'raced'`,
    );
    expect(
      rows.filter((r) => r.attempts !== 1 || r.lease_owner !== takenBy.get(r.id)?.[0]),
    ).toEqual([]);
  });

  it('a drain cuts an in-flight delivery at episodeShutdownMs and releases its row, which a peer then delivers at once', async () => {
    const leaving = await start('out-leaving', [SharedAdapter], {
      deliveryTimeoutMs: 60_000,
      episodeShutdownMs: 300,
    });
    await emit(leaving, [{ type: 'shared', key: 'drained', payload: { holdOn: 'out-leaving' } }]);
    await waitFor(
      'the delivery to start on the leaving node',
      () => callsOf('drained').length === 1,
    );
    expect(await row('drained')).toMatchObject({
      status: 'pending',
      lease_owner: 'out-leaving',
      attempts: 1,
    });
    const closedAt = performance.now();
    await leaving.close();
    apps.splice(apps.indexOf(leaving), 1);
    const cut = callsOf('drained')[0];
    expect((cut.signal.reason as Error).name).toBe('DeliveryInterruptedError');
    // Well before its 61 s lease: the drain handed the row back (its interrupted attempt not counted).
    const delivered = await ended('drained', 'delivered', 10_000);
    expect(performance.now() - closedAt).toBeLessThan(10_000);
    expect(delivered.attempts).toBe(1);
    const tries = callsOf('drained');
    expect(tries).toHaveLength(2);
    expect(['out-a', 'out-b']).toContain(tries[1].node);
    expect(tries[1].key).toBe('drained');
  });
});
