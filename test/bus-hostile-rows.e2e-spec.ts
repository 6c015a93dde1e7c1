import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Actor, Expectation, type BusEvent, type EpisodeContext } from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
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
  async function insertRow({ eventId, created, payload = `'{}'::jsonb`, published = 'now()', channel = CHANNEL }: Row) {
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       VALUES ($1, $2, 'hostile', ${payload}, ${published}, ${created})`,
      [channel, eventId],
    );
  }

  beforeAll(async () => {
    busPool = new pg.Pool({ connectionString: database.url, max: 3 });
    busPool.on('error', () => undefined);
    bus = new PostgresBus(busPool as unknown as SqlExecutor, () => ({ connectionString: database.url }), {
      channel: CHANNEL,
      publisher: () => 'hostile-test',
      retentionMs: 60_000,
    });
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
    // A consumer that has dispatched none of them: expired rows are kept until busUndispatchedMaxAgeMs (a week).
    const lagging = `INSERT INTO cyclium_bus_positions (channel, consumer, position)
                     VALUES ($1, 'test.lagging', pg_current_snapshot())`;
    await database.db.query(lagging, [channel]);
    // A batch of retention (1,000 rows by id) of rows it keeps, whose last row is dated 30 days ahead…
    const stored = Number((await database.db.query(`SELECT count(*) AS n FROM cyclium_events`)).rows[0].n);
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'kept-' || i, 'hostile', '{}', now(), now() - interval '1 hour' FROM generate_series(1, $2) i`,
      [channel, 999 - (stored % 1_000)],
    );
    await insertRow({ eventId: 'future-last', created: `now() + interval '30 days'`, channel });
    // …then rows past every window, which retention must delete.
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'overdue-' || i, 'hostile', '{}', now(), now() - interval '8 days' FROM generate_series(1, 10) i`,
      [channel],
    );
    await bus.pruneNow();
    const overdue = `SELECT count(*)::int AS n FROM cyclium_events
                      WHERE channel = $1 AND starts_with(event_id, 'overdue-')`;
    expect((await database.db.query(overdue, [channel])).rows[0].n).toBe(0);
  });

  it('dispatches an event 26 days old with busUndispatchedMaxAgeMs of 30 days', async () => {
    const app: INestApplicationContext = await startCycliumApp({
      url: database.url,
      cyclium: { busUndispatchedMaxAgeMs: 30 * DAY, busPollIntervalMs: 200 },
      providers: [AgedActor],
    });
    try {
      const episodes = `SELECT count(*)::int AS n FROM cyclium_episodes WHERE trigger_ref->>'eventId' = 'aged-26-days'`;
      // Stored after this node's expectation took its position, 26 days ago by the clock it carries.
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
