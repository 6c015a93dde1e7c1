import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import {
  Actor,
  Bus,
  Episodes,
  Expectation,
  HostTransactionError,
  Workflow,
  WorkflowEngine,
  WorkflowStep,
  type BusEvent,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import type pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const runs = new Map<string, number>();
const ran = (key: string) => runs.set(key, (runs.get(key) ?? 0) + 1);
/** Transaction steps that throw this error (code) once, by order id, before their writes commit. */
const failOnce = new Map<string, string>();

@Injectable()
@Actor({ id: 'shipper', maxConcurrentEpisodes: 10 })
class ShipperActor {
  @Expectation({ id: 'ship', trigger: 'manual' })
  async ship(ep: EpisodeContext<{ orderId: string }>): Promise<Convergence> {
    const { orderId } = ep.trigger.payload;
    ran(`ship:${orderId}`);
    return { summary: `shipped ${orderId}` };
  }

  /** Books the order in the ledger and counts it, exactly once; then a step that may crash. */
  @Expectation({
    id: 'book',
    trigger: 'manual',
    retry: { attempts: 3, backoff: { initialMs: 50 } },
  })
  async book(ep: EpisodeContext<{ orderId: string; crashAfter?: boolean }>): Promise<Convergence> {
    const { orderId, crashAfter } = ep.trigger.payload;
    const booked = await ep.transaction('book', async (manager: EntityManager) => {
      ran(`book:${orderId}`);
      await manager.query(`INSERT INTO ledger (order_id) VALUES ($1)`, [orderId]);
      await manager.query(`UPDATE counters SET n = n + 1 WHERE name = 'booked'`);
      const code = failOnce.get(orderId);
      if (code) {
        failOnce.delete(orderId);
        throw Object.assign(new Error(`injected ${code}`), { code });
      }
      return { orderId, at: 'ledger' };
    });
    await ep.step('after', () => {
      ran(`after:${orderId}`);
      if (crashAfter && (runs.get(`after:${orderId}`) ?? 0) === 1) throw new Error('crash after');
      return true;
    });
    return { summary: `booked ${booked.orderId}` };
  }
}

@Injectable()
@Actor({ id: 'packer', maxConcurrentEpisodes: 5 })
class PackerActor {
  @Expectation({ id: 'pack', trigger: 'workflow' })
  async pack(ep: EpisodeContext<{ orderId: string }>): Promise<Convergence> {
    ran(`pack:${ep.trigger.payload.orderId}`);
    return { summary: `packed ${ep.trigger.payload.orderId}` };
  }
}

@Injectable()
@Workflow({ id: 'fulfil' })
class FulfilWorkflow {
  @WorkflowStep({ actor: 'packer', expectation: 'pack' })
  pack({ input }: { input: { orderId: string } }): { orderId: string } {
    return { orderId: input.orderId };
  }
}

const INTEGRITY = { keyId: 'k1', keys: { k1: 'a-secret-of-at-least-32-characters-long' } };

/**
 * Work that commits with the host's data, on a real PostgreSQL: a trigger, a publish and a workflow
 * start written through the host's own TypeORM transaction, and transaction steps whose writes
 * commit with their checkpoint.
 */
describe('host transactions and transaction steps', () => {
  let url: string;
  let db: pg.Pool;
  let app: INestApplicationContext;
  let episodes: Episodes;
  let bus: Bus;
  let dataSource: DataSource;
  const heard: BusEvent[] = [];

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 3);
    await db.query(`CREATE TABLE orders (id text PRIMARY KEY)`);
    await db.query(`CREATE TABLE ledger (order_id text NOT NULL)`);
    await db.query(`CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL)`);
    await db.query(`INSERT INTO counters VALUES ('booked', 0)`);
    app = await startCycliumApp({
      url,
      cyclium: { nodeIdentity: 'tx-node', workClaims: 'postgres', triggerPollIntervalMs: 5_000 },
      providers: [ShipperActor, PackerActor, FulfilWorkflow],
    });
    episodes = app.get(Episodes);
    bus = app.get(Bus);
    dataSource = app.get<DataSource>(getDataSourceToken());
    bus.subscribe('order.placed', (event) => void heard.push(event));
  });

  afterAll(async () => {
    await app?.close();
    await db?.end();
  });

  const count = async (sql: string, params: unknown[] = []) =>
    Number((await db.query<{ n: string }>(sql, params)).rows[0]?.n);
  const episodesOf = (orderId: string) =>
    count(
      `SELECT count(*) AS n FROM cyclium_episodes WHERE trigger_ref->'payload'->>'orderId' = $1`,
      [orderId],
    );

  it('a rollback leaves no episode, request or wake-up; a commit runs the episode once', async () => {
    const eventsBefore = await count(`SELECT count(*) AS n FROM cyclium_events`);
    await expect(
      dataSource.transaction(async (manager) => {
        await manager.query(`INSERT INTO orders (id) VALUES ('o-rolled')`);
        const result = await episodes.trigger(
          'shipper',
          'ship',
          { orderId: 'o-rolled' },
          { manager },
        );
        expect(result.status).toBe('on_commit');
        throw new Error('the host changes its mind');
      }),
    ).rejects.toThrow('the host changes its mind');
    expect(await episodesOf('o-rolled')).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM cyclium_trigger_requests`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM cyclium_events`)).toBe(eventsBefore);

    const started = performance.now();
    const result = await dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO orders (id) VALUES ('o-1')`);
      return episodes.trigger('shipper', 'ship', { orderId: 'o-1' }, { manager });
    });
    expect(result.status).toBe('on_commit');
    if (result.status !== 'on_commit') return;
    // Seen at once from outside (the NOTIFY at commit), not at the 5 s poll.
    await waitFor(
      'o-1 done',
      async () => (await episodes.get(result.episode.id))?.status === 'done',
      4_000,
    );
    expect(performance.now() - started).toBeLessThan(4_000);
    expect(runs.get('ship:o-1')).toBe(1);
    expect(await episodesOf('o-1')).toBe(1);
    // Accepted once committed: due at once, so it never expires, as a run for later does not.
    const { rows } = await db.query<{ due: boolean }>(
      `SELECT not_before IS NOT NULL AS due FROM cyclium_trigger_requests WHERE episode_id = $1`,
      [result.episode.id],
    );
    expect(rows).toEqual([{ due: true }]);
  });

  it('a dedupe conflict answers duplicate and the host transaction still commits', async () => {
    const first = await dataSource.transaction((manager) =>
      episodes.trigger('shipper', 'ship', { orderId: 'o-2' }, { manager, dedupeKey: 'ship:o-2' }),
    );
    expect(first.status).toBe('on_commit');
    const second = await dataSource.transaction(async (manager) => {
      const result = await episodes.trigger(
        'shipper',
        'ship',
        { orderId: 'o-2' },
        { manager, dedupeKey: 'ship:o-2' },
      );
      await manager.query(`INSERT INTO orders (id) VALUES ('o-2-after')`);
      return result;
    });
    expect(second.status).toBe('duplicate');
    expect(await count(`SELECT count(*) AS n FROM orders WHERE id = 'o-2-after'`)).toBe(1);
    await waitFor('o-2 ran', () => runs.get('ship:o-2') === 1);
    expect(await episodesOf('o-2')).toBe(1);
  });

  it('a delayed trigger in the host transaction runs when due; a query runner works too', async () => {
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    await runner.startTransaction();
    const result = await episodes.trigger(
      'shipper',
      'ship',
      { orderId: 'o-3' },
      { manager: runner, delayMs: 1_000 },
    );
    await runner.commitTransaction();
    await runner.release();
    expect(result.status).toBe('on_commit');
    if (result.status !== 'on_commit') return;
    expect(result.notBefore).toBeInstanceOf(Date);
    await waitFor(
      'o-3 done',
      async () => (await episodes.get(result.episode.id))?.status === 'done',
      10_000,
    );
    const row = await db.query<{ late: boolean }>(
      `SELECT started_at >= queued_at + interval '1 second' AS late FROM cyclium_episodes WHERE id = $1`,
      [result.episode.id],
    );
    expect(row.rows[0]?.late).toBe(true);
  });

  it('refuses a manager that is not in a transaction, naming the call', async () => {
    await expect(
      episodes.trigger('shipper', 'ship', { orderId: 'o-x' }, { manager: dataSource.manager }),
    ).rejects.toThrow(HostTransactionError);
    const runner = dataSource.createQueryRunner();
    await expect(
      episodes.trigger('shipper', 'ship', { orderId: 'o-x' }, { manager: runner }),
    ).rejects.toThrow(
      /Episodes.trigger shipper.ship: the manager passed is not inside an open transaction/,
    );
    await runner.release();
    await expect(bus.publish('order.placed', {}, { manager: dataSource.manager })).rejects.toThrow(
      HostTransactionError,
    );
    expect(await episodesOf('o-x')).toBe(0);
  });

  it('Bus.publish in the host transaction: nothing after a rollback, delivered after commit', async () => {
    await expect(
      dataSource.transaction(async (manager) => {
        await bus.publish('order.placed', { orderId: 'p-rolled' }, { manager });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    await dataSource.transaction((manager) =>
      bus.publish('order.placed', { orderId: 'p-1' }, { manager, eventId: 'placed-p-1' }),
    );
    await waitFor('p-1 heard', () => heard.some((e) => e.eventId === 'placed-p-1'), 4_000);
    expect(heard.some((e) => (e.payload as { orderId: string }).orderId === 'p-rolled')).toBe(
      false,
    );
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_events WHERE payload->>'orderId' = 'p-rolled'`,
      ),
    ).toBe(0);
  });

  it('a workflow start in the host transaction: nothing after a rollback, runs after commit', async () => {
    const engine = app.get(WorkflowEngine);
    await expect(
      dataSource.transaction(async (manager) => {
        await engine.start('fulfil', { orderId: 'w-rolled' }, { manager });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_workflow_instances WHERE input->>'orderId' = 'w-rolled'`,
      ),
    ).toBe(0);
    expect(await episodesOf('w-rolled')).toBe(0);
    const id = await dataSource.transaction((manager) =>
      engine.start('fulfil', { orderId: 'w-1' }, { manager }),
    );
    await waitFor(
      'w-1 done',
      async () => {
        const { rows } = await db.query<{ status: string }>(
          `SELECT status FROM cyclium_workflow_instances WHERE id = $1`,
          [id],
        );
        return rows[0]?.status === 'done';
      },
      10_000,
    );
    expect(runs.get('pack:w-1')).toBe(1);
  });

  it('a transaction step commits its writes once with its checkpoint; a resume replays it', async () => {
    const result = await episodes.trigger('shipper', 'book', { orderId: 'b-1', crashAfter: true });
    if (!('episode' in result)) throw new Error(`not started: ${result.status}`);
    await waitFor(
      'b-1 done',
      async () => (await episodes.get(result.episode.id))?.status === 'done',
      10_000,
    );
    // The step after it failed once and the episode was retried: the transaction was replayed.
    expect(runs.get('after:b-1')).toBe(2);
    expect(runs.get('book:b-1')).toBe(1);
    expect(await count(`SELECT count(*) AS n FROM ledger WHERE order_id = 'b-1'`)).toBe(1);
    const steps = await episodes.steps(result.episode.id);
    expect(steps.filter((s) => s.kind === 'step' && s.name === 'book')).toHaveLength(1);
  });

  it('a transaction step whose function fails rolls back its writes; a serialization failure is retried in place', async () => {
    const before = await count(`SELECT n FROM counters WHERE name = 'booked'`);
    failOnce.set('b-2', 'P0001');
    failOnce.set('b-3', '40001');
    const started = await Promise.all(
      ['b-2', 'b-3'].map((orderId) => episodes.trigger('shipper', 'book', { orderId })),
    );
    for (const result of started) {
      if (!('episode' in result)) throw new Error(`not started: ${result.status}`);
      await waitFor(
        'done',
        async () => (await episodes.get(result.episode.id))?.status === 'done',
        10_000,
      );
    }
    // Each function ran twice, each committed once.
    expect(runs.get('book:b-2')).toBe(2);
    expect(runs.get('book:b-3')).toBe(2);
    expect(await count(`SELECT count(*) AS n FROM ledger WHERE order_id IN ('b-2', 'b-3')`)).toBe(
      2,
    );
    expect(await count(`SELECT n FROM counters WHERE name = 'booked'`)).toBe(before + 2);
    // The host's error failed the attempt (retried by the policy); the 40001 did not.
    const retries = await Promise.all(
      started.map(async (result) =>
        'episode' in result
          ? (await episodes.steps(result.episode.id)).filter((s) => s.name === 'retry').length
          : -1,
      ),
    );
    expect(retries).toEqual([1, 0]);
  });
});

/**
 * Where the host's transaction meets the other mechanisms: a trigger-only node triggers in the
 * host's transaction and a full node runs it; `integrity` signs the rows written there; a scope
 * override puts the episode in another env, which this env's nodes leave alone; the retry policy
 * travels with the trigger; a transaction step with claims off.
 */
describe('host transactions where they meet trigger-only mode, integrity, scope and claims off', () => {
  let url: string;
  let db: pg.Pool;
  let front: INestApplicationContext;
  let back: INestApplicationContext;
  let dataSource: DataSource;

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 3);
    await db.query(`CREATE TABLE orders (id text PRIMARY KEY)`);
    await db.query(`CREATE TABLE ledger (order_id text NOT NULL)`);
    await db.query(`CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL)`);
    await db.query(`INSERT INTO counters VALUES ('booked', 0)`);
    const node = (nodeIdentity: string, mode: 'full' | 'trigger_only') =>
      startCycliumApp({
        url,
        cyclium: {
          nodeIdentity,
          mode,
          env: 'blue',
          workClaims: false,
          integrity: INTEGRITY,
          triggerPollIntervalMs: 5_000,
        },
        providers: [ShipperActor],
      });
    [front, back] = await Promise.all([node('tx-front', 'trigger_only'), node('tx-back', 'full')]);
    dataSource = front.get<DataSource>(getDataSourceToken());
  });

  afterAll(async () => {
    await Promise.all([front?.close(), back?.close()]);
    await db?.end();
  });

  const statusOf = async (id: string) =>
    (await db.query<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]))
      .rows[0]?.status;

  it('a trigger-only node triggers in the host transaction; a full node runs it, signed', async () => {
    const episodes = front.get(Episodes);
    const result = await dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO orders (id) VALUES ('m-1')`);
      return episodes.trigger(
        'shipper',
        'book',
        { orderId: 'm-1' },
        { manager, retry: { attempts: 4, backoff: { initialMs: 50 } } },
      );
    });
    if (result.status !== 'on_commit') throw new Error(`got ${result.status}`);
    await waitFor('m-1 done', async () => (await statusOf(result.episode.id)) === 'done', 8_000);
    const { rows } = await db.query<{
      owner_node: string;
      source_env: string;
      signed: boolean;
      request_signed: boolean;
      retry: unknown;
    }>(
      `SELECT e.owner_node, e.source_env, e.signature IS NOT NULL AS signed,
              r.signature IS NOT NULL AS request_signed, e.trigger_ref->'retry' AS retry
         FROM cyclium_episodes e JOIN cyclium_trigger_requests r ON r.episode_id = e.id
        WHERE e.id = $1`,
      [result.episode.id],
    );
    expect(rows[0]).toMatchObject({
      owner_node: 'tx-back',
      source_env: 'blue',
      signed: true,
      request_signed: true,
      retry: { attempts: 4, backoff: { initialMs: 50 } },
    });
    // The transaction step ran with claims off: its writes once.
    expect(await db.query(`SELECT 1 FROM ledger WHERE order_id = 'm-1'`)).toHaveProperty(
      'rowCount',
      1,
    );
  });

  it("a scope override puts the episode in another env: this env's nodes leave it", async () => {
    const episodes = front.get(Episodes);
    const [green, blue] = await dataSource.transaction(async (manager) => [
      await episodes.trigger(
        'shipper',
        'ship',
        { orderId: 'm-green' },
        { manager, sourceEnv: 'green' },
      ),
      await episodes.trigger('shipper', 'ship', { orderId: 'm-blue' }, { manager }),
    ]);
    if (green?.status !== 'on_commit' || blue?.status !== 'on_commit')
      throw new Error('not written');
    // Written in the same transaction, found by the same poll: the blue one ran, the green one waits.
    await waitFor('m-blue done', async () => (await statusOf(blue.episode.id)) === 'done', 8_000);
    expect(await statusOf(green.episode.id)).toBe('deferred');
    const { rows } = await db.query<{ source_env: string; status: string }>(
      `SELECT source_env, status FROM cyclium_trigger_requests WHERE episode_id = $1`,
      [green.episode.id],
    );
    expect(rows).toEqual([{ source_env: 'green', status: 'pending' }]);
  });
});
