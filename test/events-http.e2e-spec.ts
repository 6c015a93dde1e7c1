import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';
import { rawRequest } from './support/raw-request.js';
import { waitFor } from './support/wait-for.js';

interface Answer {
  status: number;
  retryAfter: string | null;
  body: { message?: string; field?: string; eventId?: string };
}

/** POST /events on a real demo node: a publish is stored (202) or refused with a status that says why, never dropped. */
describe('POST /events and POST /actors refuse what they cannot store, naming the field', () => {
  const database = useDatabase();
  let node: DemoNode;

  beforeAll(async () => {
    // A queue of one publish and a small payload limit, so both bounds are reached with little data.
    node = await startDemoNode(database.url, {
      CYCLIUM_NODE_ID: 'http-1',
      DEMO_BUS_QUEUE_MAX: '1',
      DEMO_BUS_MAX_PAYLOAD_BYTES: '2000',
    });
  });

  afterAll(async () => {
    await node?.stop('SIGTERM');
  });

  const publish = async (body: unknown): Promise<Answer> => {
    const response = await fetch(`http://127.0.0.1:${node.port}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return {
      status: response.status,
      retryAfter: response.headers.get('retry-after'),
      body: (await response.json()) as Answer['body'],
    };
  };

  const rows = async (eventId: string) =>
    (
      await database.db.query(
        `SELECT type, payload, created_at FROM cyclium_events WHERE event_id = $1`,
        [eventId],
      )
    ).rows;

  it('answers 400 for an eventId or type over 200 characters and 413 for a payload over the limit, storing nothing', async () => {
    const longId = await publish({ type: 'http.test', eventId: 'x'.repeat(4_000), payload: {} });
    expect(longId).toMatchObject({ status: 400, body: { field: 'eventId' } });
    expect(longId.body.message).toMatch(/eventId must be at most 200 characters/);
    expect(await publish({ type: 't'.repeat(201), payload: {} })).toMatchObject({
      status: 400,
      body: { field: 'type' },
    });
    const big = await publish({
      type: 'http.test',
      eventId: 'too-big',
      payload: { blob: 'x'.repeat(3_000) },
    });
    expect(big).toMatchObject({ status: 413, body: { field: 'payload' } });
    expect(big.body.message).toMatch(/over the limit of 2000/);
    expect(await rows('too-big')).toEqual([]);
    expect(
      (
        await database.db.query(
          `SELECT count(*)::int AS n FROM cyclium_events WHERE length(event_id) > 200 OR length(type) > 200`,
        )
      ).rows[0].n,
    ).toBe(0);
  });

  it('answers 409 for an eventId stored with another type or payload, 202 for an identical retry; the stored event is unchanged', async () => {
    expect(
      await publish({ type: 'http.test', eventId: 'order-9', payload: { n: 9 } }),
    ).toMatchObject({ status: 202, body: { eventId: 'order-9' } });
    const before = await rows('order-9');
    const conflict = await publish({ type: 'http.other', eventId: 'order-9', payload: { n: 9 } });
    expect(conflict).toMatchObject({ status: 409, body: { field: 'eventId' } });
    expect(conflict.body.message).toMatch(/already stored with another type or payload/);
    expect(
      await publish({ type: 'http.test', eventId: 'order-9', payload: { n: 10 } }),
    ).toMatchObject({ status: 409 });
    expect(
      await publish({ type: 'http.test', eventId: 'order-9', payload: { n: 9 } }),
    ).toMatchObject({ status: 202 });
    expect(await rows('order-9')).toEqual(before);
    expect(before).toHaveLength(1);
  });

  it('answers 400 naming the field for a manual trigger PostgreSQL could not store, writing nothing', async () => {
    const trigger = async (body: unknown) => {
      const response = await fetch(
        `http://127.0.0.1:${node.port}/actors/resource_rebalancer/rebalance`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        },
      );
      return { status: response.status, body: (await response.json()) as Answer['body'] };
    };
    const nulPayload = await trigger({ payload: { note: 'a\u0000b' } });
    expect(nulPayload).toMatchObject({ status: 400, body: { field: 'payload' } });
    expect(nulPayload.body.message).toMatch(/NUL character/);
    expect(await trigger({ payload: {}, dedupeKey: 'k\u0000' })).toMatchObject({
      status: 400,
      body: { field: 'dedupeKey' },
    });
    const long = await trigger({ payload: {}, dedupeKey: 'é'.repeat(600) }); // 600 characters, 1,200 bytes
    expect(long).toMatchObject({ status: 400, body: { field: 'dedupeKey' } });
    expect(long.body.message).toMatch(/at most 1000 bytes/);
    const written = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_rebalancer'`,
    );
    expect(written.rows[0].n).toBe(0);
  });

  it('refuses what its actors could only misread, a field it does not know, a delay past a year, a runAt past, an unknown episode and a bad mode, naming the field and writing nothing', async () => {
    const send = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
      const response = await fetch(`http://127.0.0.1:${node.port}${path}`, {
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Answer['body'] };
    };
    const trigger = '/actors/resource_rebalancer/rebalance';
    const past = new Date(Date.now() - 60_000).toISOString();
    const decades = new Date(Date.now() + 1e12).toISOString();
    const cases: Array<
      [method: 'GET' | 'POST', path: string, body: unknown, answer: number, field?: string]
    > = [
      ['POST', '/events', { type: 'resource.updated', payload: 'x' }, 400, 'payload'],
      ['POST', '/events', { type: 'resource.updated', payload: [1] }, 400, 'payload'],
      ['POST', '/events', { type: 'resource.updated', payload: null }, 400, 'payload'],
      ['POST', '/events', { type: 'resource.updated', payload: {} }, 400, 'payload.resource'],
      [
        'POST',
        '/events',
        { type: 'resource.updated', payload: { resource: 'r' } },
        400,
        'payload.usage',
      ],
      [
        'POST',
        '/events',
        { type: 'resource.updated', payload: { resource: 'r', usage: '9' } },
        400,
        'payload.usage',
      ],
      [
        'POST',
        '/events',
        { type: 'resource.rebalance', payload: { resource: 'r', stepMs: -1 } },
        400,
        'payload.stepMs',
      ],
      [
        'POST',
        '/events',
        { type: 'resource.updated', payload: { resource: 'r', usage: 1 }, colour: 'red' },
        400,
        'colour',
      ],
      ['POST', trigger, { payload: null }, 400, 'payload'],
      ['POST', trigger, { payload: { resource: 'r' }, delayMS: 1000 }, 400, 'delayMS'],
      ['POST', trigger, { payload: { resource: 'r' }, delayMs: 1e12 }, 400, 'delayMs'],
      ['POST', trigger, { payload: { resource: 'r' }, runAt: past }, 400, 'runAt'],
      ['POST', trigger, { payload: { resource: 'r' }, runAt: decades }, 400, 'runAt'],
      ['GET', `/episodes/${randomUUID()}/steps`, undefined, 404],
      ['GET', `/episodes/${randomUUID()}`, undefined, 404],
      ['POST', '/mode', { mode: 'turbo' }, 400, 'mode'],
      [
        'POST',
        '/mode',
        { overrides: { resource_monitor: 'turbo' } },
        400,
        'overrides.resource_monitor',
      ],
      [
        'POST',
        '/mode',
        { overrides: { resource_monitor: 'trigger_only', nobody: 'full' } },
        400,
        'overrides.nobody',
      ],
      ['POST', '/workflows/resource_review', { input: 'x' }, 400, 'input'],
    ];
    for (const [method, path, body, status, field] of cases) {
      const answer = await send(method, path, body);
      expect({ method, path, body, status: answer.status, field: answer.body.field }).toEqual({
        method,
        path,
        body,
        status,
        field,
      });
    }
    // The refused override changed nothing, not even the valid one before it.
    expect(await send('GET', '/mode')).toMatchObject({ status: 200, body: { overrides: {} } });
    const written = await database.db.query(
      `SELECT (SELECT count(*)::int FROM cyclium_events WHERE type LIKE 'resource.%') AS events,
              (SELECT count(*)::int FROM cyclium_episodes
                WHERE actor_id IN ('resource_rebalancer', 'resource_monitor')) AS episodes`,
    );
    expect(written.rows[0]).toEqual({ events: 0, episodes: 0 });
  });

  it('refuses a write that a page elsewhere could forge: a form body, a bodiless write, Origin null or foreign, a foreign Host', async () => {
    const url = `http://127.0.0.1:${node.port}`;
    const json = JSON.stringify({ type: 'resource.updated', payload: { resource: 'r', usage: 1 } });
    type Init = { headers?: Record<string, string>; body?: unknown };
    const attempts: Array<[what: string, path: string, init: Init, status: number, field: string]> =
      [
        [
          'a url-encoded form',
          '/events',
          { body: new URLSearchParams({ type: 'resource.updated' }) },
          415,
          'content-type',
        ],
        [
          'a text/plain form',
          '/events',
          { headers: { 'content-type': 'text/plain' }, body: json },
          415,
          'content-type',
        ],
        [
          'a multipart form',
          '/actors/resource_rebalancer/rebalance',
          { body: new FormData() },
          415,
          'content-type',
        ],
        ['a bodiless write', '/recovery/reconcile', {}, 415, 'content-type'],
        ['a bodiless cancel', `/workflows/${randomUUID()}/cancel`, {}, 415, 'content-type'],
        [
          'Origin null',
          '/mode',
          {
            headers: { 'content-type': 'application/json', origin: 'null' },
            body: '{"mode":"disabled"}',
          },
          403,
          'origin',
        ],
        [
          'a foreign Origin',
          '/events',
          {
            headers: { 'content-type': 'application/json', origin: 'https://evil.example' },
            body: json,
          },
          403,
          'origin',
        ],
        [
          'a foreign Host',
          '/events',
          { headers: { 'content-type': 'application/json', host: 'rebound.example' }, body: json },
          403,
          'host',
        ],
      ];
    for (const [what, path, init, status, field] of attempts) {
      const answer = await rawRequest(`${url}${path}`, { method: 'POST', ...init });
      expect({ what, status: answer.status, field: answer.body.field }).toEqual({
        what,
        status,
        field,
      });
    }
    // A foreign Host is refused for reads too (DNS rebinding reads as much as it writes).
    expect((await rawRequest(`${url}/mode`, { headers: { host: 'rebound.example' } })).status).toBe(
      403,
    );
    // This host's own page, and tools that send no Origin, still write.
    const own = await rawRequest(`${url}/mode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8', origin: url },
      body: '{"mode":"full"}',
    });
    expect(own.status).toBe(200);
    const written = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_events WHERE type LIKE 'resource.%'`,
    );
    expect(written.rows[0].n).toBe(0);
  });

  it('answers 503 with Retry-After at once while its publish queue is full, and stores what it had accepted', async () => {
    const locker = await database.db.connect();
    let first: Promise<Answer> | undefined;
    try {
      // Inserts into cyclium_events wait on this lock: the database is slow for as long as the test holds it.
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE cyclium_events IN SHARE ROW EXCLUSIVE MODE');
      first = publish({ type: 'http.test', eventId: 'queued-1', payload: {} });
      await waitFor(
        'the first publish to wait on the lock',
        async () =>
          (
            await database.db.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO cyclium_events%'`,
            )
          ).rows.length > 0,
      );
      const refused = await publish({ type: 'http.test', eventId: 'queued-2', payload: {} });
      expect(refused.status).toBe(503);
      expect(refused.retryAfter).toBe('1');
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
    expect(await first).toMatchObject({ status: 202, body: { eventId: 'queued-1' } });
    expect(await rows('queued-1')).toHaveLength(1);
    expect(await rows('queued-2')).toEqual([]);
    // Room again: the refused publish succeeds when retried.
    expect(await publish({ type: 'http.test', eventId: 'queued-2', payload: {} })).toMatchObject({
      status: 202,
    });
  });
});
