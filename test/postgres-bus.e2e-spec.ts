import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import {
  DatabaseUnavailableError,
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
  PublishQueueFullError,
} from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import type { BusEvent } from '../libs/cyclium/src/bus/bus.interface.js';
import { EventLog } from '../libs/cyclium/src/bus/event-log.js';
import { GuardedBus } from '../libs/cyclium/src/bus/guarded-bus.js';
import { PostgresBus } from '../libs/cyclium/src/bus/postgres-bus.js';
import type { PostgresBusOptions } from '../libs/cyclium/src/bus/postgres-bus-options.interface.js';
import { freePort } from './support/free-port.js';
import type { SqlExecutor } from '../libs/cyclium/src/sql/sql-executor.js';
import { insertEventsBehindUndispatched } from '../bench/support/history-fixtures.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const CHANNEL = busChannel('bus-e2e', null);

/** One "node": its own pool behind a statement counter, its own bus, and everything it received. */
interface BusNode {
  bus: PostgresBus;
  db: pg.Pool;
  statements: string[];
  received: BusEvent[];
  /** Where its LISTEN connection goes; a test can point it at a dead port to cut the node off. */
  listenTo: { port: number | undefined };
  /** Names of prepared statements the node's next run of fails once each (a statement timeout, say). */
  failOnce: Set<string>;
  of(type: string): BusEvent[];
  has(event: BusEvent): boolean;
}

const jsonOf = (event: BusEvent) => JSON.parse(JSON.stringify(event)) as BusEvent;

describe('PostgresBus: the durable bus against a real PostgreSQL', () => {
  let url: string;
  let admin: pg.Pool;
  const nodes: BusNode[] = [];
  let a: BusNode;
  let b: BusNode;

  /** A slow fallback timer, so every delivery in these tests is explained by a wake-up or a reconnect. */
  function node(
    channel: string,
    scope: { stackSlug?: string | null; env?: string | null } = {},
    pollIntervalMs = 600_000,
    wantsEverything = true,
    limits: Pick<PostgresBusOptions, 'maxPayloadBytes' | 'publishQueueMax'> = {},
  ): BusNode {
    const db = pool(url, 3);
    const statements: string[] = [];
    const failOnce = new Set<string>();
    const sql: SqlExecutor = {
      query: (...args: [never]) => {
        const first: unknown = args[0];
        statements.push(typeof first === 'string' ? first : (first as pg.QueryConfig).text);
        const name = typeof first === 'string' ? undefined : (first as pg.QueryConfig).name;
        if (name !== undefined && failOnce.delete(name)) {
          const timeout = Object.assign(new Error('canceling statement due to statement timeout'), {
            code: '57014',
          });
          return Promise.reject(timeout);
        }
        return db.query(...args);
      },
    };
    const listenTo: { port: number | undefined } = { port: undefined };
    const name = `node-${nodes.length + 1}`;
    const bus = new PostgresBus(
      sql,
      () => {
        const config: pg.ClientConfig = { connectionString: url };
        if (listenTo.port !== undefined) {
          const target = new URL(url);
          target.port = String(listenTo.port);
          config.connectionString = target.toString();
        }
        return config;
      },
      { channel, ...scope, publisher: () => name, pollIntervalMs, ...limits },
    );
    const received: BusEvent[] = [];
    if (wantsEverything) bus.subscribe('*', (event) => void received.push(event));
    const created: BusNode = {
      bus,
      db,
      statements,
      received,
      listenTo,
      failOnce,
      of: (type) => received.filter((e) => e.type === type),
      has: (event) => received.some((e) => e.eventId === event.eventId),
    };
    nodes.push(created);
    return created;
  }

  /** Publishes a marker from `from` and waits until every node in `on` has it: nothing published before it is still in flight. */
  async function settle(from: BusNode, on: BusNode[]): Promise<void> {
    const marker = await from.bus.publish('marker', null);
    await waitFor('the marker to reach every node', () => on.every((n) => n.has(marker)));
  }

  const stored = async (eventId: string) =>
    (
      await admin.query(
        `SELECT channel, type, payload, publisher FROM cyclium_events WHERE event_id = $1`,
        [eventId],
      )
    ).rows;

  beforeAll(async () => {
    url = await freshDatabase();
    admin = pool(url, 2);
    a = node(CHANNEL);
    b = node(CHANNEL);
    await Promise.all([a.bus.start(), b.bus.start()]);
    await a.bus.start(); // idempotent
  });

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.bus.stop()));
    await Promise.all(nodes.map((n) => n.db.end()));
    await admin?.end();
  });

  it('stores an event before publish resolves, then delivers it once to every node, the publisher included', async () => {
    const typed: BusEvent[] = [];
    const off = b.bus.subscribe('greeting', (event) => void typed.push(event));

    const published = await a.bus.publish('greeting', { hello: 'world', n: 1 });
    // Durable first: the row is committed by the time the publisher hears back.
    expect(await stored(published.eventId)).toEqual([
      {
        channel: CHANNEL,
        type: 'greeting',
        payload: { hello: 'world', n: 1 },
        publisher: 'node-1',
      },
    ]);
    await settle(a, [a, b]);
    off();

    expect(a.of('greeting')).toEqual([jsonOf(published)]);
    expect(b.of('greeting')).toEqual([jsonOf(published)]);
    expect(typed).toEqual([jsonOf(published)]);
  });

  it('does not read back what a node woke the channel for when no handler on it wants it', async () => {
    const channel = busChannel('bus-quiet', null);
    const quiet = node(channel, {}, 600_000, false);
    const peer = node(channel);
    await Promise.all([quiet.bus.start(), peer.bus.start()]);
    const markers: BusEvent[] = [];
    quiet.bus.subscribe('marker', (event) => void markers.push(event));
    const reads = () =>
      quiet.statements.filter(
        (s) => s.includes('s.snap::text AS snapshot') || s.includes('pg_visible_in_snapshot'),
      ).length;
    const before = reads();

    const sent = [];
    for (let n = 1; n <= 5; n++) sent.push(await quiet.bus.publish('quiet.unwanted', { n }));
    await waitFor('the peer to read all five', () => peer.of('quiet.unwanted').length === 5);
    // The peer's marker is the first thing the quiet node wants: one read, for it alone.
    const marker = await peer.bus.publish('marker', null);
    await waitFor('the quiet node to hear the marker', () =>
      markers.some((e) => e.eventId === marker.eventId),
    );
    expect(reads() - before).toBe(1);
    expect(peer.of('quiet.unwanted').map((e) => e.eventId)).toEqual(sent.map((e) => e.eventId));
  });

  it('stores a repeated event id once and delivers it once: an identical retry resolves, from any node', async () => {
    const first = await a.bus.publish(
      'retry',
      { attempt: 1, of: 'delivery-7' },
      { eventId: 'delivery-7' },
    );
    // The same event (jsonb equality: key order does not matter), retried from another node.
    const again = await b.bus.publish(
      'retry',
      { of: 'delivery-7', attempt: 1 },
      { eventId: 'delivery-7' },
    );
    expect(again.eventId).toBe(first.eventId);
    await settle(a, [a, b]);
    expect(await stored('delivery-7')).toHaveLength(1);
    expect(a.of('retry').map((e) => e.payload)).toEqual([{ attempt: 1, of: 'delivery-7' }]);
    expect(b.of('retry').map((e) => e.payload)).toEqual([{ attempt: 1, of: 'delivery-7' }]);
  });

  it('three concurrent publishes, one with a 4,000-character id: the other two are stored; the id reused with a new type is refused and the stored event is unchanged', async () => {
    const [left, long, right] = await Promise.allSettled([
      a.bus.publish('order.placed', { n: 1 }, { eventId: 'order-1' }),
      a.bus.publish('order.placed', { n: 2 }, { eventId: 'x'.repeat(4_000) }),
      a.bus.publish('order.placed', { n: 3 }, { eventId: 'order-3' }),
    ]);
    expect(left.status).toBe('fulfilled');
    expect(right.status).toBe('fulfilled');
    const tooLong = (long as PromiseRejectedResult).reason as InvalidBusEventError;
    expect(tooLong).toBeInstanceOf(InvalidBusEventError);
    expect(tooLong.field).toBe('eventId');
    expect(tooLong.message).toMatch(/eventId must be at most 200 characters/);
    const before = await stored('order-1');
    expect(before).toEqual([
      { channel: CHANNEL, type: 'order.placed', payload: { n: 1 }, publisher: 'node-1' },
    ]);
    expect(await stored('order-3')).toHaveLength(1);
    expect(
      (
        await admin.query(
          `SELECT count(*)::int AS n FROM cyclium_events WHERE length(event_id) > 200`,
        )
      ).rows[0].n,
    ).toBe(0);

    const reused = b.bus.publish('order.shipped', { n: 1 }, { eventId: 'order-1' });
    await expect(reused).rejects.toBeInstanceOf(EventIdConflictError);
    await expect(reused).rejects.toThrow(
      /"order-1" is already stored with another type or payload/,
    );
    await expect(
      b.bus.publish('order.placed', { n: 99 }, { eventId: 'order-1' }),
    ).rejects.toBeInstanceOf(EventIdConflictError);
    await expect(
      b.bus.publish('order.placed', { n: 1 }, { eventId: 'order-1' }),
    ).resolves.toMatchObject({ eventId: 'order-1' });
    expect(await stored('order-1')).toEqual(before);
    await settle(a, [a, b]);
    expect(b.of('order.shipped')).toEqual([]);
    expect(b.of('order.placed').map((e) => e.eventId)).toEqual(['order-1', 'order-3']);
  });

  it('settles each publish of one batch on its own when they share an id, and a race between nodes has one winner', async () => {
    // One tick, one statement: the first of each id is stored, the rest compared with it.
    const sameTick = await Promise.allSettled([
      a.bus.publish('dup', 'first', { eventId: 'dup-1' }),
      a.bus.publish('dup', 'first', { eventId: 'dup-1' }),
      a.bus.publish('dup', 'second', { eventId: 'dup-1' }),
    ]);
    expect(sameTick.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((sameTick[2] as PromiseRejectedResult).reason).toBeInstanceOf(EventIdConflictError);
    expect((await stored('dup-1')).map((r) => r.payload)).toEqual(['first']);

    // Two nodes at once: whichever commits first wins; the other is told, never silently merged.
    for (let round = 0; round < 10; round++) {
      const id = `race-${round}`;
      const outcomes = await Promise.allSettled([
        a.bus.publish('race', 'from-a', { eventId: id }),
        b.bus.publish('race', 'from-b', { eventId: id }),
      ]);
      const won = outcomes.findIndex((o) => o.status === 'fulfilled');
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      expect((outcomes[1 - won] as PromiseRejectedResult).reason).toBeInstanceOf(
        EventIdConflictError,
      );
      expect((await stored(id)).map((r) => r.payload)).toEqual([won === 0 ? 'from-a' : 'from-b']);
    }
  });

  it("refuses an id taken by another event inside the caller's transaction (appendWithin), and appends an identical one", async () => {
    const client = await admin.connect();
    try {
      const event = {
        type: 'within',
        eventId: 'within-1',
        payload: { k: 1 },
        publishedAt: new Date().toISOString(),
      };
      await client.query('BEGIN');
      await a.bus.appendWithin(client, [event]);
      await a.bus.appendWithin(client, [{ ...event, publishedAt: new Date().toISOString() }]); // its own row, seen in its transaction
      await expect(
        a.bus.appendWithin(client, [{ ...event, payload: { k: 2 } }]),
      ).rejects.toBeInstanceOf(EventIdConflictError);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect((await stored('within-1')).map((r) => r.payload)).toEqual([{ k: 1 }]);
  });

  it('bounds types and payload bytes at publish, naming the field, and stores nothing of a refused event', async () => {
    const small = node(CHANNEL, {}, 600_000, false, { maxPayloadBytes: 1_000 });
    const longType = await small.bus
      .publish('t'.repeat(201), {}, { eventId: 'long-type' })
      .catch((e: unknown) => e);
    expect(longType).toBeInstanceOf(InvalidBusEventError);
    expect((longType as InvalidBusEventError).field).toBe('type');
    const big = await small.bus
      .publish('big', { blob: 'x'.repeat(1_000) }, { eventId: 'too-big' })
      .catch((e: unknown) => e);
    expect(big).toBeInstanceOf(EventPayloadTooLargeError);
    expect(big).toMatchObject({ field: 'payload', limitBytes: 1_000, bytes: 1_011 });
    expect((big as Error).message).toMatch(/"too-big".*1011 bytes.*limit of 1000/);
    await expect(
      small.bus.publish('big', { blob: 'x'.repeat(900) }, { eventId: 'fits' }),
    ).resolves.toMatchObject({ eventId: 'fits' });
    expect(await stored('long-type')).toEqual([]);
    expect(await stored('too-big')).toEqual([]);
    expect(await stored('fits')).toHaveLength(1);
  });

  it('answers backpressure at once, not a growing queue, while the database is slow: PublishQueueFullError, a DatabaseUnavailableError', async () => {
    const slow = node(CHANNEL, {}, 600_000, false, { publishQueueMax: 3 });
    const locker = await admin.connect();
    let held: Array<Promise<BusEvent>>;
    try {
      // Inserts wait on this lock: the database is "slow" for as long as the test holds it.
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE cyclium_events IN SHARE ROW EXCLUSIVE MODE');
      held = [0, 1, 2].map((i) => slow.bus.publish('slow', i, { eventId: `slow-${i}` }));
      await waitFor(
        'the first insert to wait on the lock',
        async () =>
          (
            await admin.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO cyclium_events%'`,
            )
          ).rows.length > 0,
      );
      const refused = await slow.bus
        .publish('slow', 3, { eventId: 'slow-3' })
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(PublishQueueFullError);
      expect(refused).toBeInstanceOf(DatabaseUnavailableError);
      expect((refused as Error).message).toMatch(/3 publishes are already waiting.*"slow-3"/);
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
    await Promise.all(held);
    expect(
      (
        await admin.query(`SELECT event_id FROM cyclium_events WHERE type = 'slow' ORDER BY id`)
      ).rows.map((r) => r.event_id),
    ).toEqual(['slow-0', 'slow-1', 'slow-2']);
    await expect(slow.bus.publish('slow', 4, { eventId: 'slow-4' })).resolves.toMatchObject({
      eventId: 'slow-4',
    }); // room again
  });

  it('group-commits 300 events of one tick into one statement, delivered complete and in order', async () => {
    const before = a.statements.length;
    const publishes: Array<Promise<BusEvent<{ i: number }>>> = [];
    for (let i = 0; i < 300; i++) publishes.push(a.bus.publish('seq', { i }));
    const events = await Promise.all(publishes);
    const inserts = a.statements
      .slice(before)
      .filter((s) => s.includes('INSERT INTO cyclium_events'));
    expect(inserts).toHaveLength(1);

    await waitFor('300 events on node b', () => b.of('seq').length >= 300);
    expect(b.of('seq')).toEqual(events.map(jsonOf));
    await waitFor('300 events back on the publisher', () => a.of('seq').length >= 300);
    expect(a.of('seq').map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));
  });

  it('delivers more than a page (1,200 events in one commit) in full and in order', async () => {
    const events = await Promise.all(
      Array.from({ length: 1_200 }, (_, i) => a.bus.publish('bulk', i)),
    );
    await waitFor('1,200 events on node b', () => b.of('bulk').length >= 1_200, 20_000);
    expect(b.of('bulk').map((e) => e.payload)).toEqual(events.map((_, i) => i));
    await settle(a, [a, b]);
    expect(b.of('bulk')).toHaveLength(1_200);
  }, 30_000);

  it('gives a consumer that joins while a paged read is interrupted the pages it already handed out', async () => {
    const channel = busChannel('bus-e2e-paged', null);
    const c = node(channel, {}, 600_000, false);
    await c.bus.start();
    try {
      // One commit of 1,200 rows: a read of it takes three pages, and the second one fails.
      const client = await admin.connect();
      try {
        await client.query('BEGIN');
        const at = new Date().toISOString();
        const event = (i: number) => ({
          type: 'paged',
          eventId: `paged-${i}`,
          payload: i,
          publishedAt: at,
        });
        const events = Array.from({ length: 1_200 }, (_, i) => event(i));
        await c.bus.appendWithin(client, events);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      c.failOnce.add('cyclium_events_read_page');
      await c.bus.catchUp();
      expect(c.bus.status().readFailing).toBe(true);

      const got: number[] = [];
      c.bus.subscribeDurable<number>(
        'late.joiner',
        'paged',
        async (event) => void got.push(event.payload),
      );
      // Without them, it got the 700 of the pages still to come and never the first 500.
      await waitFor('1,200 events for the joiner', () => got.length >= 1_200, 15_000).catch(
        () => undefined,
      );
      expect(got).toHaveLength(1_200);
      expect(got).toEqual(Array.from({ length: 1_200 }, (_, i) => i));
    } finally {
      await c.bus.stop();
      await admin.query(`DELETE FROM cyclium_bus_positions WHERE channel = $1`, [channel]);
    }
  }, 30_000);

  it('reads at most 4 MiB of payload a statement and still delivers every event, in full and in order', async () => {
    const log = new EventLog({
      channel: CHANNEL,
      stackSlug: null,
      env: null,
      publisher: () => 'reader',
    });
    const from = await log.snapshot(admin);
    // Random base64 does not compress: each payload is stored at about its 900 KB.
    const payloads = Array.from({ length: 12 }, () => randomBytes(675_000).toString('base64'));
    const events = await Promise.all(payloads.map((payload) => a.bus.publish('large', payload)));
    await waitFor('12 large events on node b', () => b.of('large').length >= 12, 20_000);
    expect(b.of('large').map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));
    expect(b.of('large').every((e, i) => e.payload === payloads[i])).toBe(true);

    const first = await log.readAfter(admin, from, 500);
    expect(first.more).toBe(true);
    // The rows whose payloads, as text, fit 4 MiB together: four of about 900 KB.
    expect(first.events.length).toBe(4);
    const rest = await log.readPage(admin, from, first.snapshot, first.events[3], 500);
    expect(rest.events.length).toBeLessThanOrEqual(4);
  }, 30_000);

  it('delivers rows whose ids commit out of order: none is skipped, none repeated', async () => {
    // A transaction takes the lower id and holds it open while a later one commits a higher id.
    const late = await admin.connect();
    try {
      await late.query('BEGIN');
      const lateEvent = {
        type: 'order',
        eventId: 'late-1',
        payload: 'late',
        publishedAt: new Date().toISOString(),
      };
      await a.bus.appendWithin(late, [lateEvent]);
      const early = await a.bus.publish('order', 'early');
      await waitFor('the early commit on node b', () => b.has(early));
      expect(b.of('order').map((e) => e.payload)).toEqual(['early']);

      await late.query('COMMIT');
      a.bus.wake();
      await waitFor('the late commit on node b', () => b.of('order').length === 2);
      const ids = await admin.query<{ event_id: string; id: string }>(
        `SELECT event_id, id::text FROM cyclium_events WHERE type = 'order' ORDER BY id`,
      );
      // The late row has the lower id, yet it arrived, after the early one.
      expect(ids.rows.map((r) => r.event_id)).toEqual(['late-1', early.eventId]);
      expect(b.of('order').map((e) => e.payload)).toEqual(['early', 'late']);
      await settle(a, [a, b]);
      expect(b.of('order')).toHaveLength(2);
      expect(a.of('order')).toHaveLength(2);
    } finally {
      late.release();
    }
  });

  it('a node cut off from its wake-ups catches up after it reconnects, exactly once each', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const log = jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    try {
      // Cut b off: its LISTEN connection is killed, and every reconnect attempt goes to a dead port.
      b.listenTo.port = await freePort();
      const killed = await admin.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE datname = current_database() AND query = $1 AND backend_type = 'client backend'`,
        [`LISTEN "${CHANNEL}"`],
      );
      expect(killed.rows.length).toBe(2);
      await waitFor('b to notice', () => !b.bus.listening, 5_000, 5);

      const missed: BusEvent[] = [];
      for (let i = 0; i < 20; i++) missed.push(await a.bus.publish('while.away', i));
      await waitFor('a, still listening, to have them', () => missed.every((e) => a.has(e)));
      expect(b.of('while.away')).toEqual([]); // b heard nothing and read nothing meanwhile

      b.listenTo.port = undefined;
      await waitFor('b to listen again', () => b.bus.listening, 10_000, 10);
      await waitFor('b to catch up', () => b.of('while.away').length >= 20);
      await settle(a, [a, b]);
      expect(b.of('while.away').map((e) => e.payload)).toEqual(missed.map((_, i) => i));
      expect(a.of('while.away')).toHaveLength(20);
    } finally {
      b.listenTo.port = undefined;
      warn.mockRestore();
      log.mockRestore();
    }
  }, 30_000);

  it('refuses a payload PostgreSQL cannot store, naming the event; its neighbours still go out', async () => {
    const [nul, surrogate, escaped, neighbour] = await Promise.allSettled([
      a.bus.publish('nul', { text: 'a\u0000b' }, { eventId: 'nul-1' }),
      a.bus.publish('nul', { text: 'half \ud83d of an emoji' }, { eventId: 'nul-2' }),
      a.bus.publish(
        'nul',
        { text: 'a literal \\u0000 is fine, and so is 😀' },
        { eventId: 'nul-3' },
      ),
      a.bus.publish('nul', 'neighbour', { eventId: 'nul-4' }),
    ]);
    for (const [outcome, id] of [
      [nul, 'nul-1'],
      [surrogate, 'nul-2'],
    ] as const) {
      expect(outcome.status).toBe('rejected');
      const reason = (outcome as PromiseRejectedResult).reason as Error;
      expect(reason).toBeInstanceOf(InvalidBusEventError);
      expect(reason.message).toContain(`"${id}"`);
      expect(reason.message).toMatch(/NUL character or an unpaired surrogate/);
    }
    expect(escaped.status).toBe('fulfilled');
    expect(neighbour.status).toBe('fulfilled');
    await settle(a, [a, b]);
    expect(b.of('nul').map((e) => e.eventId)).toEqual(['nul-3', 'nul-4']);
    expect(await stored('nul-1')).toEqual([]);
  });

  it("refuses the library's reserved types through the Bus hosts get, and says why", async () => {
    const guarded = new GuardedBus(a.bus);
    for (const type of ['episode.completed', 'cyclium.episode.cancel', 'cyclium.anything']) {
      await expect(guarded.publish(type, {})).rejects.toThrow(/is reserved for the library/);
    }
    await expect(guarded.publish('*', {})).rejects.toThrow(InvalidBusEventError);
    const fine = await guarded.publish('episodes.listed', { ok: true }); // only the exact prefixes are reserved
    await waitFor('the allowed event on b', () => b.has(fine));
  });

  it('a publisher that cannot reach the database gets DatabaseUnavailableError, not an acknowledgement', async () => {
    const dead = new URL(url);
    dead.port = String(await freePort());
    const unreachable = new pg.Pool({ connectionString: dead.toString(), max: 1 });
    unreachable.on('error', () => undefined);
    try {
      const bus = new PostgresBus(unreachable, () => ({ connectionString: dead.toString() }), {
        channel: CHANNEL,
      });
      const failed = bus.publish('lost', { n: 1 }, { eventId: 'never-stored' });
      await expect(failed).rejects.toBeInstanceOf(DatabaseUnavailableError);
      await expect(failed).rejects.toThrow(/never-stored/);
    } finally {
      await unreachable.end();
    }
  });

  it('keeps stacks and envs apart: buses on different channels never see each other', async () => {
    const x = node(busChannel('a', null), { stackSlug: 'a' });
    const y = node(busChannel(null, 'rc'), { env: 'rc' });
    expect(x.bus.channel).not.toBe(y.bus.channel);
    await Promise.all([x.bus.start(), y.bus.start()]);

    const y1 = await y.bus.publish('scoped', 'y1');
    const x1 = await x.bus.publish('scoped', 'x1');
    await settle(x, [x]);
    await settle(y, [y]);
    await settle(a, [a, b]);
    expect(x.of('scoped').map((e) => e.payload)).toEqual(['x1']);
    expect(y.of('scoped').map((e) => e.payload)).toEqual(['y1']);
    expect(a.of('scoped')).toEqual([]);
    expect(b.of('scoped')).toEqual([]);
    const rows = await admin.query(
      `SELECT event_id, source_stack, source_env FROM cyclium_events WHERE event_id = ANY($1) ORDER BY id`,
      [[y1.eventId, x1.eventId]],
    );
    expect(rows.rows).toEqual([
      { event_id: y1.eventId, source_stack: null, source_env: 'rc' },
      { event_id: x1.eventId, source_stack: 'a', source_env: null },
    ]);
  });

  it("prunes its channel's events older than the retention window, by the database clock, and no other's", async () => {
    const old = await a.bus.publish('aged', 'old');
    const fresh = await a.bus.publish('aged', 'fresh');
    // Aged rows of other stacks and envs, and of no stack (a stack's node never reads those): not its to delete.
    const others = [busChannel(null, null), busChannel('other', null), busChannel('bus-e2e', 'rc')];
    others.push(busChannel(null, 'rc'));
    await admin.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at)
       SELECT c, 'foreign-' || n, 'aged', '{}', now() FROM unnest($1::text[]) WITH ORDINALITY AS o (c, n)`,
      [others],
    );
    // Everything up to `old` was stored two hours ago, as the database's clock tells it; the foreign rows too.
    await admin.query(
      `UPDATE cyclium_events SET created_at = now() - interval '2 hours'
        WHERE id <= (SELECT id FROM cyclium_events WHERE event_id = $1) OR starts_with(event_id, 'foreign-')`,
      [old.eventId],
    );
    const agedOf = async (channel: string) => {
      const aged = `SELECT count(*)::int AS n FROM cyclium_events
                     WHERE created_at < now() - interval '1 hour' AND channel = $1`;
      return (await admin.query(aged, [channel])).rows[0].n as number;
    };
    const foreign = `SELECT count(*)::int AS n FROM cyclium_events WHERE starts_with(event_id, 'foreign-')`;
    const aged = await agedOf(CHANNEL);
    expect(aged).toBeGreaterThan(1_000); // more than one batch
    // The default window is an hour; pruning runs on a timer, and on demand.
    expect(await a.bus.pruneNow()).toBe(aged);
    expect(await stored(old.eventId)).toEqual([]);
    expect(await stored(fresh.eventId)).toHaveLength(1);
    expect((await admin.query(foreign)).rows[0].n).toBe(others.length);
    await admin.query(`DELETE FROM cyclium_events WHERE starts_with(event_id, 'foreign-')`);
  });

  const walk =
    'keeps up: one pass walks past 1,000 events it must keep to delete the 50,000 expired behind them';
  it(`${walk}, and stands aside while another node of its channel prunes`, async () => {
    const channel = 'prune_walk';
    const walker = node(channel, {}, 600_000, false);
    await walker.bus.start();
    const left = async (prefix: string) =>
      (
        await admin.query(
          `SELECT count(*)::int AS n FROM cyclium_events WHERE channel = $1 AND event_id LIKE $2`,
          [channel, `${prefix}%`],
        )
      ).rows[0].n as number;
    try {
      // The kept rows take the lowest ids but commit last, after a consumer's position was taken: it has not dispatched them.
      await insertEventsBehindUndispatched(admin, channel, 1_000, 50_000);
      const other = await admin.connect();
      try {
        await other.query('BEGIN');
        await other.query('SELECT pg_advisory_xact_lock(1692411771, hashtext($1))', [channel]);
        expect(await walker.bus.pruneNow()).toBe(0);
        expect(await left('gone-')).toBe(50_000);
        // A node of another channel prunes its own meanwhile.
        const aside = await a.bus.publish('aged', 'pruned while another channel prunes');
        const age = `UPDATE cyclium_events SET created_at = now() - interval '2 hours' WHERE event_id = $1`;
        await admin.query(age, [aside.eventId]);
        expect(await a.bus.pruneNow()).toBe(1);
        await other.query('COMMIT');
      } finally {
        other.release();
      }
      expect(await walker.bus.pruneNow()).toBeGreaterThanOrEqual(50_000);
      expect(await left('gone-')).toBe(0);
      expect(await left('kept-')).toBe(1_000);
    } finally {
      await admin.query(`DELETE FROM cyclium_bus_positions WHERE channel = $1`, [channel]);
      await admin.query(`DELETE FROM cyclium_events WHERE channel = $1`, [channel]);
    }
  });

  it('keeps an event a consumer has not dispatched past the retention window, until busUndispatchedMaxAgeMs, then prunes and counts it', async () => {
    // An expectation whose every host is gone: its position stays where it was when this event came.
    await admin.query(
      `INSERT INTO cyclium_bus_positions (channel, consumer, position) VALUES ($1, 'gone.away', pg_current_snapshot())`,
      [CHANNEL],
    );
    try {
      const held = await a.bus.publish('held', 'nobody dispatched me');
      await admin.query(
        `UPDATE cyclium_events SET created_at = now() - interval '2 hours' WHERE channel = $1`,
        [CHANNEL],
      );
      await a.bus.pruneNow();
      expect(await stored(held.eventId)).toHaveLength(1);
      expect(a.bus.status().undispatchedPruned).toBe(0);

      await admin.query(
        `UPDATE cyclium_events SET created_at = now() - interval '8 days' WHERE event_id = $1`,
        [held.eventId],
      );
      const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
      try {
        expect(await a.bus.pruneNow()).toBe(1);
        expect(
          warn.mock.calls.some(([message]) => String(message).includes('busUndispatchedMaxAgeMs')),
        ).toBe(true);
      } finally {
        warn.mockRestore();
      }
      expect(await stored(held.eventId)).toEqual([]);
      expect(a.bus.status().undispatchedPruned).toBe(1);
    } finally {
      await admin.query(`DELETE FROM cyclium_bus_positions WHERE channel = $1`, [CHANNEL]);
    }
  });

  it("holds for a position only its consumer's type: others' events go at the retention window", async () => {
    const channel = busChannel('bus-e2e-typed', null);
    const c = node(channel);
    await c.bus.start();
    const aging = `UPDATE cyclium_events SET created_at = now() - $3::interval WHERE channel = $1 AND type = $2`;
    const age = (type: string, interval: string) => admin.query(aging, [channel, type, interval]);
    const left = async (type: string) => {
      const count = `SELECT count(*)::int AS n FROM cyclium_events WHERE channel = $1 AND type = $2`;
      return (await admin.query<{ n: number }>(count, [channel, type])).rows[0]?.n;
    };
    const positionsOf = `FROM cyclium_bus_positions WHERE channel = $1`;
    const positionRows = (columns: string) =>
      admin.query(`SELECT ${columns} ${positionsOf}`, [channel]);
    const handed: string[] = [];
    // Its one event never settles: its position stays before it, and before everything after it.
    c.bus.subscribeDurable('idle.wanted', 'wanted', (event) => {
      handed.push(event.eventId);
      return new Promise<void>(() => undefined);
    });
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      await waitFor('the position row', async () => (await positionRows('consumer')).rowCount);
      const wanted = await c.bus.publish('wanted', 1);
      for (let i = 0; i < 3; i++) await c.bus.publish('unwanted', i);
      await waitFor('the wanted event handed over', () => handed.includes(wanted.eventId));
      await settle(c, [c]);

      // Past the retention window, not the undispatched one: the other type goes, the held event stays.
      await age('unwanted', '2 hours');
      await age('wanted', '2 hours');
      await c.bus.pruneNow();
      expect({ wanted: await left('wanted'), unwanted: await left('unwanted') }).toEqual({
        wanted: 1,
        unwanted: 0,
      });

      await age('wanted', '8 days');
      await c.bus.pruneNow();
      expect(await left('wanted')).toBe(0);
      // Only the event of its own type counts as undispatched.
      expect(c.bus.status().undispatchedPruned).toBe(1);
      expect((await positionRows('consumer, type')).rows).toEqual([
        { consumer: 'idle.wanted', type: 'wanted' },
      ]);
    } finally {
      warn.mockRestore();
      await c.bus.stop();
      await admin.query(`DELETE FROM cyclium_bus_positions WHERE channel = $1`, [channel]);
      await admin.query(`DELETE FROM cyclium_events WHERE channel = $1`, [channel]);
    }
  });

  it('stops: stop closes the LISTEN connection, one per bus however often it was started', async () => {
    const listeners = async () =>
      (
        await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
          [`LISTEN "${CHANNEL}"`],
        )
      ).rows[0]?.n;
    const before = await listeners();
    const z = node(CHANNEL);
    await Promise.all([z.bus.start(), z.bus.start()]);
    expect(z.bus.listening).toBe(true);
    expect(await listeners()).toBe((before ?? 0) + 1);
    await z.bus.stop();
    expect(z.bus.listening).toBe(false);
    await waitFor('z to leave pg_stat_activity', async () => (await listeners()) === before);
  });
});
