import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import pg from 'pg';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import type { BusEvent } from '../libs/cyclium/src/bus/bus.interface.js';
import { MAX_CHUNK_BYTES, PostgresBus } from '../libs/cyclium/src/bus/postgres-bus.js';
import type { SqlExecutor } from '../libs/cyclium/src/database/sql-executor.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const CHANNEL = busChannel('bus-e2e', null);

/** One "node": its own pool (max 2) behind a statement counter, its own bus, and everything it received. */
interface BusNode {
  bus: PostgresBus;
  db: pg.Pool;
  statements: string[];
  received: BusEvent[];
  of(type: string): BusEvent[];
  has(event: BusEvent): boolean;
}

/** Every notification on CHANNEL as PostgreSQL delivered it, seen by a plain pg client. */
interface Observed {
  bytes: number;
  items: unknown[];
}

const jsonOf = (event: BusEvent) => JSON.parse(JSON.stringify(event)) as BusEvent;

describe('PostgresBus against a real PostgreSQL', () => {
  let url: string;
  let admin: pg.Pool;
  let observer: pg.Client;
  const observed: Observed[] = [];
  const nodes: BusNode[] = [];
  let a: BusNode;
  let b: BusNode;

  function node(channel: string): BusNode {
    const db = pool(url, 2);
    const statements: string[] = [];
    const sql: SqlExecutor = {
      query: (...args: [never]) => {
        const first: unknown = args[0];
        statements.push(typeof first === 'string' ? first : (first as pg.QueryConfig).text);
        return db.query(...args);
      },
    };
    const bus = new PostgresBus(sql, () => ({ connectionString: url }), channel);
    const received: BusEvent[] = [];
    bus.subscribe('*', (event) => void received.push(event));
    const created: BusNode = {
      bus,
      db,
      statements,
      received,
      of: (type) => received.filter((e) => e.type === type),
      has: (event) => received.some((e) => e.eventId === event.eventId),
    };
    nodes.push(created);
    return created;
  }

  /** Publishes a marker from `from` and waits until every node in `on` has it: nothing sent before it is still in flight. */
  async function settle(from: BusNode, on: BusNode[]): Promise<void> {
    const marker = await from.bus.publish('marker', null);
    await waitFor('the marker to reach every node', () => on.every((n) => n.has(marker)));
  }

  beforeAll(async () => {
    url = await freshDatabase();
    admin = pool(url, 1);
    observer = new pg.Client({ connectionString: url });
    await observer.connect();
    observer.on('notification', (message) => {
      const payload = message.payload ?? '';
      let items: unknown[] = [];
      try {
        const parsed: unknown = JSON.parse(payload);
        if (Array.isArray(parsed)) items = parsed;
      } catch {
        // the bad-notification test sends some on purpose
      }
      observed.push({ bytes: Buffer.byteLength(payload, 'utf8'), items });
    });
    // The comment keeps the observer out of the reconnect test's `query = 'LISTEN ...'` match.
    await observer.query(`/* observer */ LISTEN "${CHANNEL}"`);
    a = node(CHANNEL);
    b = node(CHANNEL);
    await Promise.all([a.bus.start(), b.bus.start()]);
    await a.bus.start(); // idempotent
  });

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.bus.stop()));
    await Promise.all(nodes.map((n) => n.db.end()));
    await observer?.end();
    await admin?.end();
  });

  it('starts listening on the channel it was given', () => {
    expect(CHANNEL).toMatch(/^cyclium_bus_[0-9a-f]{16}$/);
    expect(a.bus.listening).toBe(true);
    expect(b.bus.listening).toBe(true);
  });

  it('delivers one publish once to every node, the publisher included, with the same eventId', async () => {
    const typed: BusEvent[] = [];
    const off = b.bus.subscribe('greeting', (event) => void typed.push(event));

    const published = await a.bus.publish('greeting', { hello: 'world', n: 1 });
    expect(published.eventId).toMatch(/^[0-9a-f-]{36}$/);
    await settle(a, [a, b]);
    off();

    expect(a.of('greeting')).toEqual([jsonOf(published)]);
    expect(b.of('greeting')).toEqual([jsonOf(published)]);
    expect(typed).toEqual([jsonOf(published)]);

    const given = await b.bus.publish('greeting', 2, { eventId: 'delivery-7' });
    await settle(b, [a, b]);
    expect(a.of('greeting').map((e) => e.eventId)).toEqual([published.eventId, 'delivery-7']);
    expect(b.of('greeting').map((e) => e.eventId)).toEqual([published.eventId, given.eventId]);
  }, 30_000);

  it('coalesces 300 events of one tick into one statement, delivered complete and in order', async () => {
    const before = a.statements.length;
    const observedBefore = observed.length;
    const publishes: Array<Promise<BusEvent<{ i: number; filler: string }>>> = [];
    for (let i = 0; i < 300; i++) publishes.push(a.bus.publish('seq', { i, filler: `${'x'.repeat(100)}${'é'.repeat(30)}` }));
    const events = await Promise.all(publishes);
    const statements = a.statements.slice(before);

    await waitFor('300 events on node b', () => b.of('seq').length >= 300);
    expect(b.of('seq').map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));
    expect(b.of('seq').map((e) => (e.payload as { i: number }).i)).toEqual(events.map((_, i) => i));
    expect(b.of('seq')).toEqual(events.map(jsonOf));
    await waitFor('300 events back on the publisher', () => a.of('seq').length >= 300);
    expect(a.of('seq').map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));

    const bytes = events.reduce((sum, e) => sum + Buffer.byteLength(JSON.stringify(e), 'utf8') + 1, 1);
    const chunksNeeded = Math.ceil(bytes / MAX_CHUNK_BYTES);
    expect(chunksNeeded).toBeGreaterThan(1);
    expect(statements.length).toBeLessThanOrEqual(chunksNeeded);
    expect(statements.length).toBeLessThan(10);
    expect(statements.filter((s) => s.includes('pg_notify'))).toHaveLength(1);

    await waitFor('the observer to see all 300', () => observed.slice(observedBefore).flatMap((o) => o.items).length >= 300);
    const chunks = observed.slice(observedBefore);
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.length).toBeLessThanOrEqual(chunksNeeded + 1);
    for (const chunk of chunks) expect(chunk.bytes).toBeLessThan(MAX_CHUNK_BYTES);
    process.stdout.write(
      `postgres-bus: 300 events (${bytes} bytes of JSON) -> ${statements.length} statement(s) ` +
        `[${statements.map((s) => s.trim().split(/\s+/).slice(0, 2).join(' ')).join(' | ')}], ` +
        `${chunks.length} notification(s) of ${chunks.map((c) => c.bytes).join('/')} bytes (minimum ${chunksNeeded})\n`,
    );
  }, 30_000);

  it('carries a ~40 KB event through cyclium_bus_payloads, intact and in order with its neighbours', async () => {
    const blob = `${'a'.repeat(20_000)}${'ü€😀'.repeat(2_000)}"\\'\u0001`;
    const observedBefore = observed.length;
    const [first, big, last] = await Promise.all([
      a.bus.publish('big.before', 1),
      a.bus.publish('big', { blob, nested: { list: [1, 2, 3] } }),
      a.bus.publish('big.after', 2),
    ]);
    expect(Buffer.byteLength(JSON.stringify(big))).toBeGreaterThan(35_000);

    await waitFor('the big event and its neighbours on node b', () => b.has(last));
    const order = b.received.filter((e) => e.type.startsWith('big')).map((e) => e.type);
    expect(order).toEqual(['big.before', 'big', 'big.after']);
    expect(b.of('big')).toEqual([jsonOf(big)]);
    expect((b.of('big')[0]?.payload as { blob: string }).blob).toBe(blob);
    await waitFor('the big event back on the publisher', () => a.has(last));
    expect(a.of('big')).toEqual([jsonOf(big)]);
    expect(a.has(first)).toBe(true);

    const stored = await admin.query<{ id: string; event_id: string }>(
      `SELECT id, event->>'eventId' AS event_id FROM cyclium_bus_payloads WHERE event->>'eventId' = $1`,
      [big.eventId],
    );
    expect(stored.rows).toHaveLength(1);
    const notified = observed.slice(observedBefore).flatMap((o) => o.items);
    expect(notified).toContainEqual({ ref: stored.rows[0]?.id });
    for (const chunk of observed.slice(observedBefore)) expect(chunk.bytes).toBeLessThan(MAX_CHUNK_BYTES);
  }, 30_000);

  it('rejects only an oversize event that jsonb cannot hold; its neighbours still go out', async () => {
    const [bad, small, neighbour] = await Promise.allSettled([
      a.bus.publish('nul.big', { blob: `${'x'.repeat(10_000)}\u0000` }),
      a.bus.publish('nul.small', 'a\u0000b'), // NOTIFY text carries the \u0000 escape fine
      a.bus.publish('nul.neighbour', 1),
    ]);
    expect(bad.status).toBe('rejected');
    expect(String((bad as PromiseRejectedResult).reason)).toMatch(/cyclium_bus_payloads as jsonb, which refused it/);
    expect(small.status).toBe('fulfilled');
    expect(neighbour.status).toBe('fulfilled');

    await settle(a, [a, b]);
    expect(b.of('nul.small').map((e) => e.payload)).toEqual(['a\u0000b']);
    expect(b.of('nul.neighbour')).toHaveLength(1);
    expect(b.of('nul.big')).toEqual([]);
  }, 30_000);

  it('skips bad notifications with a log line and keeps delivering', async () => {
    const error = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      const missing = '00000000-0000-4000-8000-000000000000';
      const good = { type: 'forged.ok', eventId: 'forged-1', payload: 1, publishedAt: new Date().toISOString() };
      for (const payload of ['not json', '{"not":"an array"}', JSON.stringify([{ ref: missing }, { bogus: true }, good])]) {
        await admin.query(`SELECT pg_notify($1, $2)`, [CHANNEL, payload]);
      }
      await settle(a, [a, b]);

      // The good neighbour of the bad items still arrives.
      expect(a.of('forged.ok')).toEqual([good]);
      expect(b.of('forged.ok')).toEqual([good]);
      const messages = error.mock.calls.map((call) => String(call[0]));
      for (const expected of [/not JSON/, /not an array/, new RegExp(`${missing}.*no such row`), /malformed event/]) {
        expect(messages.filter((m) => expected.test(m))).toHaveLength(2);
      }
    } finally {
      error.mockRestore();
    }
  }, 30_000);

  it('reconnects after its LISTEN connection is killed, and receives what is published afterwards', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const log = jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    try {
      const killed = await admin.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
        [`LISTEN "${CHANNEL}"`],
      );
      expect(killed.rows).toEqual([{ ok: true }, { ok: true }]);

      let aDropped = false;
      let bDropped = false;
      await waitFor(
        'both buses to notice the lost connection',
        () => {
          aDropped ||= !a.bus.listening;
          bDropped ||= !b.bus.listening;
          return aDropped && bDropped;
        },
        5_000,
        5,
      );
      await waitFor('both buses to listen again', () => a.bus.listening && b.bus.listening, 10_000, 10);
      expect(warn.mock.calls.some((call) => /lost the LISTEN connection/.test(String(call[0])))).toBe(true);

      const after = await a.bus.publish('after.reconnect', { ok: true });
      await waitFor('the post-reconnect event on both nodes', () => a.has(after) && b.has(after));
      const fromB = await b.bus.publish('after.reconnect', { ok: 'b' });
      await waitFor('node b publishing after its reconnect', () => a.has(fromB) && b.has(fromB));
    } finally {
      warn.mockRestore();
      log.mockRestore();
    }
  }, 30_000);

  it('keeps stacks and envs apart: buses on different channels never see each other', async () => {
    const x = node(busChannel('a', null));
    const y = node(busChannel(null, 'rc'));
    expect(x.bus.channel).not.toBe(y.bus.channel);
    await Promise.all([x.bus.start(), y.bus.start()]);

    // Awaited in turn, so each commit follows the previous one. A listener reads the one
    // notification queue in commit order, so once it has an event it has passed every earlier
    // commit: x1 proves x skipped y1, y2 proves y skipped x1, x2 proves x skipped y2.
    const y1 = await y.bus.publish('scoped', 'y1');
    const x1 = await x.bus.publish('scoped', 'x1');
    const y2 = await y.bus.publish('scoped', 'y2');
    const x2 = await x.bus.publish('scoped', 'x2');
    await waitFor('each side to receive its own events', () => x.has(x2) && y.has(y2));

    expect(x.of('scoped').map((e) => e.payload)).toEqual(['x1', 'x2']);
    expect(y.of('scoped').map((e) => e.payload)).toEqual(['y1', 'y2']);
    expect(x.has(x1) && y.has(y1)).toBe(true);

    // And the default-scope buses of this file heard none of it.
    await settle(a, [a, b]);
    expect(a.of('scoped')).toEqual([]);
    expect(b.of('scoped')).toEqual([]);
  }, 30_000);

  it('stops: start is idempotent, stop closes the LISTEN connection', async () => {
    const listeners = async () =>
      (
        await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
          [`LISTEN "${CHANNEL}"`],
        )
      ).rows[0]?.n;
    const z = node(CHANNEL);
    await Promise.all([z.bus.start(), z.bus.start()]);
    expect(z.bus.listening).toBe(true);
    expect(await listeners()).toBe(3); // a, b and z: one connection each despite two starts

    await z.bus.stop();
    expect(z.bus.listening).toBe(false);
    await waitFor('z to leave pg_stat_activity', async () => (await listeners()) === 2);
  }, 30_000);
});
