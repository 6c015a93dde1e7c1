import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import {
  Actor,
  EventPayloadTooLargeError,
  Expectation,
  type BusEvent,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import { READ_MAX_BYTES, jsonbTextBytes } from '../libs/cyclium/src/bus/event-bounds.js';
import { BusRetention } from '../libs/cyclium/src/bus/bus-retention.js';
import { EventLog } from '../libs/cyclium/src/bus/event-log.js';
import { PostgresBus } from '../libs/cyclium/src/bus/postgres-bus.js';
import type { SqlExecutor } from '../libs/cyclium/src/sql/sql-executor.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const DAY = 86_400_000;
const CHANNEL = busChannel('hostile-rows', null);

@Injectable()
@Actor({ id: 'aged' })
class AgedActor {
  @Expectation({ id: 'on_aged', trigger: { event: 'test.aged' } })
  async run(ep: EpisodeContext): Promise<void> {
    await ep.step('s1', () => 1);
  }
}

/**
 * Rows that no role should be able to turn into an outage, written straight into cyclium_events as
 * a hostile (or foreign) writer with INSERT could: the channel they sit on keeps delivering what
 * follows them, and retention keeps walking past them.
 */
describe('hostile rows on a bus channel', () => {
  const database = useDatabase();
  let bus: PostgresBus;
  let busPool: pg.Pool;
  const received: BusEvent[] = [];
  const has = (id: string) => received.some((event) => event.eventId === id);

  interface Row {
    eventId: string;
    /** SQL, as the columns' values. */
    created: string;
    payload?: string;
    published?: string;
    channel?: string;
  }

  /** Inserts a row as a writer with INSERT on the table could. */
  async function insertRow({
    eventId,
    created,
    payload = `'{}'::jsonb`,
    published = 'now()',
    channel = CHANNEL,
  }: Row) {
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       VALUES ($1, $2, 'hostile', ${payload}, ${published}, ${created})`,
      [channel, eventId],
    );
  }

  beforeAll(async () => {
    busPool = new pg.Pool({ connectionString: database.url, max: 3 });
    busPool.on('error', () => undefined);
    bus = new PostgresBus(
      busPool as unknown as SqlExecutor,
      () => ({ connectionString: database.url }),
      {
        channel: CHANNEL,
        publisher: () => 'hostile-test',
        retentionMs: 60_000,
        undispatchedMaxAgeMs: 40 * DAY,
      },
    );
    bus.subscribe('*', (event) => void received.push(event));
    await bus.start();
  });

  afterAll(async () => {
    await bus?.stop();
    await busPool?.end();
  });

  it('keeps delivering after rows stored at infinity and 30 days ahead', async () => {
    await insertRow({ eventId: 'at-infinity', created: `'infinity'`, published: `'infinity'` });
    await insertRow({ eventId: '30-days-ahead', created: `now() + interval '30 days'` });
    const after = await bus.publish('after-future', { n: 1 });
    await waitFor('the event after the future-dated rows', () => has(after.eventId), 10_000);
    expect(has('at-infinity') && has('30-days-ahead')).toBe(true);
  });

  it('prunes on past a future-dated row that ends a batch', async () => {
    const channel = busChannel('hostile-prune', null);
    const log = new EventLog({
      channel,
      stackSlug: 'hostile-prune',
      env: null,
      publisher: () => 'pruner',
    });
    const retention = new BusRetention(busPool as unknown as SqlExecutor, log, 60_000, 40 * DAY);
    // A consumer that has dispatched none of them: expired rows are kept until busUndispatchedMaxAgeMs (40 days).
    const lagging = `INSERT INTO cyclium_bus_positions (channel, consumer, position)
                     VALUES ($1, 'test.lagging', pg_current_snapshot())`;
    await database.db.query(lagging, [channel]);
    // A batch of retention (the channel's first 1,000 rows) of rows it keeps, whose last row is dated 30 days ahead…
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'kept-' || i, 'hostile', '{}', now(), now() - interval '1 hour' FROM generate_series(1, 999) i`,
      [channel],
    );
    await insertRow({ eventId: 'future-last', created: `now() + interval '30 days'`, channel });
    // …then rows past every window, which retention must delete.
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'overdue-' || i, 'hostile', '{}', now(), now() - interval '50 days' FROM generate_series(1, 10) i`,
      [channel],
    );
    await retention.pruneNow();
    const overdue = `SELECT count(*)::int AS n FROM cyclium_events
                      WHERE channel = $1 AND starts_with(event_id, 'overdue-')`;
    expect((await database.db.query(overdue, [channel])).rows[0].n).toBe(0);
  });

  it('leaves a very compressible payload far over the read budget unread, and delivers what follows it', async () => {
    const log = new EventLog({
      channel: CHANNEL,
      stackSlug: null,
      env: null,
      publisher: () => 'reader',
    });
    const from = await log.snapshot(busPool as unknown as SqlExecutor);
    // 32 MiB of JSON text that PostgreSQL stores in well under 1 MiB.
    await insertRow({
      eventId: 'compressible',
      created: 'now()',
      payload: `to_jsonb(repeat('x', 32 * 1048576))`,
    });
    const stored = `SELECT pg_column_size(payload) AS n FROM cyclium_events WHERE event_id = 'compressible'`;
    expect(Number((await database.db.query(stored)).rows[0].n)).toBeLessThan(1_048_576);
    const after = await bus.publish('after-compressible', { n: 1 });

    // Each read loads at most the budget: the row over it comes back without its payload.
    const read = await log.readAfter(busPool as unknown as SqlExecutor, from, 500);
    const bytesOf = (logged: (typeof read.events)[number]) =>
      Buffer.byteLength(JSON.stringify(logged.event.payload));
    const loaded = read.events.reduce((sum, logged) => sum + bytesOf(logged), 0);
    expect(loaded).toBeLessThanOrEqual(READ_MAX_BYTES);
    const hostile = read.events.find((logged) => logged.event.eventId === 'compressible');
    expect(hostile?.oversizedBytes).toBe(32 * 1_048_576 + 2);
    expect(read.events.map((logged) => logged.event.eventId)).toContain(after.eventId);

    await waitFor('the event after the compressible one', () => has(after.eventId), 10_000);
    expect(has('compressible')).toBe(false);
  });

  it('refuses to publish a payload whose jsonb would print over the read budget, and bounds the option', async () => {
    // 140 KB of JSON; PostgreSQL prints each 1e300 with its 301 digits: about 6 MB.
    const numbers = Array.from({ length: 20_000 }, () => 1e300);
    await expect(bus.publish('printed-large', numbers)).rejects.toBeInstanceOf(
      EventPayloadTooLargeError,
    );
    const app = startCycliumApp({
      url: database.url,
      cyclium: { busMaxPayloadBytes: 200 * 1_048_576 },
    });
    await expect(app).rejects.toThrow(
      /busMaxPayloadBytes must be a whole number of bytes from 1 to 2097152/,
    );
  });

  it('measures jsonb text as PostgreSQL prints it', async () => {
    const numbers = [1e21, -1.5e-7, 1.2345e25, 5e-324, 1e300, 0.1, -0];
    const samples = [{ a: 1, b: [1, 2, { c: 'd,e:f' }] }, numbers, 'é\n"q"', { k: null, t: true }];
    for (const sample of samples) {
      const json = JSON.stringify(sample);
      const printed = await database.db.query(`SELECT octet_length($1::jsonb::text) AS n`, [json]);
      expect([json, jsonbTextBytes(json)]).toEqual([json, printed.rows[0].n]);
    }
  });

  it('dispatches an event 26 days old with busUndispatchedMaxAgeMs of 30 days', async () => {
    const app: INestApplicationContext = await startCycliumApp({
      url: database.url,
      cyclium: { busUndispatchedMaxAgeMs: 30 * DAY, busPollIntervalMs: 200 },
      providers: [AgedActor],
    });
    try {
      const episodes = `SELECT count(*)::int AS n FROM cyclium_episodes WHERE trigger_ref->>'eventId' = 'aged-26-days'`;
      // Stored after this node's expectation took its position (before it, retention may take it for
      // one nobody wants), 26 days ago by the clock it carries.
      const positioned = `SELECT count(*)::int AS n FROM cyclium_bus_positions WHERE consumer = 'aged.on_aged'`;
      const hasPosition = async () => (await database.db.query(positioned)).rows[0].n === 1;
      await waitFor('the expectation to take its position', hasPosition);
      await database.db.query(
        `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
         VALUES ($1, 'aged-26-days', 'test.aged', '{}', now(), now() - interval '26 days')`,
        [busChannel(null, null)],
      );
      const started = async () => (await database.db.query(episodes)).rows[0].n === 1;
      await waitFor('the aged event to start its episode', started, 15_000);
    } finally {
      await app.close();
    }
  });
});
