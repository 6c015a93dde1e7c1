import { describe, expect, it } from '@jest/globals';
import type { QueryConfig, QueryResult } from 'pg';
import { DatabaseTimeoutError, DatabaseUnavailableError } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import {
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
  PublishQueueFullError,
} from './bus-errors.js';
import { PostgresBus } from './postgres-bus.js';
import type { PostgresBusOptions } from './postgres-bus-options.interface.js';

interface Append {
  ids: string[];
}

/**
 * A database that stores every append unless told otherwise: `refuse` throws for a statement
 * holding a given id (as PostgreSQL fails a whole statement for one row), `sameAs` answers that an
 * id is already stored (true: identically, false: differently). No connection is ever opened.
 */
function fakeDatabase(
  refuse: (ids: string[]) => Error | undefined = () => undefined,
  sameAs: Record<string, boolean> = {},
) {
  const appends: Append[] = [];
  let hold: Promise<void> | undefined;
  const sql = {
    async query(config: QueryConfig): Promise<QueryResult> {
      const result = (rows: unknown[]) =>
        ({ rows, rowCount: rows.length }) as unknown as QueryResult;
      if (!config.name?.includes('events_append')) return result([]);
      await hold;
      const ids = config.values?.[4] as string[];
      const error = refuse(ids);
      if (error) throw error;
      appends.push({ ids });
      return result(ids.flatMap((id, i) => (id in sameAs ? [{ n: i + 1, same: sameAs[id] }] : [])));
    },
  } as SqlExecutor;
  return {
    sql,
    appends,
    /** Appends wait until the returned function is called. */
    block: () => {
      let release = () => undefined as void;
      hold = new Promise<void>((resolve) => (release = resolve));
      return () => {
        hold = undefined;
        release();
      };
    },
  };
}

const busOn = (sql: SqlExecutor, options: Partial<PostgresBusOptions> = {}) =>
  new PostgresBus(sql, () => ({}), { channel: 'cyclium_bus_unit', ...options });

const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('PostgresBus publishing (no database)', () => {
  it(
    'retries a batch one by one when one row is over a PostgreSQL limit (54000): only that ' +
      'publish fails',
    async () => {
      const db = fakeDatabase((ids) =>
        ids.includes('poison')
          ? pgError('54000', 'index row size 4016 exceeds btree version 4 maximum 2704')
          : undefined,
      );
      const bus = busOn(db.sql);
      const [first, poison, last] = await Promise.allSettled([
        bus.publish('t', 1, { eventId: 'first' }),
        bus.publish('t', 2, { eventId: 'poison' }),
        bus.publish('t', 3, { eventId: 'last' }),
      ]);
      expect(first.status).toBe('fulfilled');
      expect(last.status).toBe('fulfilled');
      expect((poison as PromiseRejectedResult).reason).toBeInstanceOf(InvalidBusEventError);
      expect(((poison as PromiseRejectedResult).reason as Error).message).toMatch(
        /"poison".*index row size/,
      );
      expect(db.appends.map((a) => a.ids)).toEqual([['first'], ['last']]);
      await bus.flushPending();
    },
  );

  it(
    'retries one by one on any per-row error, but fails the whole batch at once while the ' +
      'database is away',
    async () => {
      const odd = fakeDatabase((ids) =>
        ids.includes('odd') ? pgError('XX000', 'something about this row') : undefined,
      );
      const bus = busOn(odd.sql);
      const outcomes = await Promise.allSettled([
        bus.publish('t', 1, { eventId: 'odd' }),
        bus.publish('t', 2, { eventId: 'fine' }),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'fulfilled']);

      let statements = 0;
      const away = fakeDatabase(() => {
        statements++;
        return pgError('57P01', 'terminating connection due to administrator command');
      });
      const cut = busOn(away.sql);
      const lost = await Promise.allSettled([
        cut.publish('t', 1),
        cut.publish('t', 2),
        cut.publish('t', 3),
      ]);
      for (const outcome of lost)
        expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(DatabaseUnavailableError);
      expect(statements).toBe(1);
      await Promise.all([bus.flushPending(), cut.flushPending()]);
    },
  );

  it(
    'refuses the publishes queued behind a statement that timed out at once, sending nothing of ' +
      'theirs',
    async () => {
      let timeOut: (() => void) | undefined;
      let statements = 0;
      const sql = {
        query: () => {
          statements++;
          return new Promise(
            (_, reject) =>
              (timeOut = () =>
                reject(new DatabaseTimeoutError('cyclium: no answer', new Error('no answer')))),
          );
        },
      } as unknown as SqlExecutor;
      const bus = busOn(sql);
      const first = bus.publish('t', 1, { eventId: 'in-flight' }).catch((e: unknown) => e);
      await new Promise((resolve) => setImmediate(resolve));
      const queued = [
        bus.publish('t', 2, { eventId: 'queued-1' }),
        bus.publish('t', 3, { eventId: 'queued-2' }),
      ].map((p) => p.catch((e: unknown) => e));
      timeOut?.();
      expect(await first).toBeInstanceOf(DatabaseUnavailableError);
      for (const refused of await Promise.all(queued)) {
        expect(refused).toBeInstanceOf(DatabaseUnavailableError);
        expect((refused as Error).message).toMatch(
          /did not store event "queued-\d".*the publish ahead of it timed out/,
        );
      }
      expect(statements).toBe(1);
    },
  );

  it(
    'resolves an identical retry and refuses the same id with another meaning, per event of one ' +
      'batch',
    async () => {
      const db = fakeDatabase(undefined, { retry: true, reused: false });
      const bus = busOn(db.sql);
      const [fresh, retry, reused] = await Promise.allSettled([
        bus.publish('t', 1, { eventId: 'fresh' }),
        bus.publish('t', 2, { eventId: 'retry' }),
        bus.publish('other', 3, { eventId: 'reused' }),
      ]);
      expect(fresh.status).toBe('fulfilled');
      expect(retry.status).toBe('fulfilled');
      const conflict = (reused as PromiseRejectedResult).reason as EventIdConflictError;
      expect(conflict).toBeInstanceOf(EventIdConflictError);
      expect(conflict.name).toBe('EventIdConflictError');
      expect(conflict.eventId).toBe('reused');
      expect(db.appends).toHaveLength(1); // one statement for the batch
      await bus.flushPending();
    },
  );

  it(
    'refuses a payload over maxPayloadBytes before anything is queued, naming the ' + 'field',
    async () => {
      const db = fakeDatabase();
      const bus = busOn(db.sql, { maxPayloadBytes: 100 });
      const error = (await bus
        .publish('t', { text: 'é'.repeat(60) }, { eventId: 'big' })
        .catch((e: unknown) => e)) as EventPayloadTooLargeError;
      expect(error).toBeInstanceOf(EventPayloadTooLargeError);
      expect(error).toBeInstanceOf(InvalidBusEventError);
      expect([error.field, error.bytes, error.limitBytes]).toEqual(['payload', 131, 100]);
      await bus.publish('t', { text: 'é'.repeat(40) }); // 91 bytes: fits
      expect(db.appends.map((a) => a.ids.length)).toEqual([1]);
    },
  );

  it(
    'refuses at once, as backpressure, a publish past publishQueueMax while the database is ' +
      'slow',
    async () => {
      const db = fakeDatabase();
      const release = db.block();
      const bus = busOn(db.sql, { publishQueueMax: 2 });
      const held = [bus.publish('t', 1), bus.publish('t', 2)];
      const refused = (await bus
        .publish('t', 3, { eventId: 'third' })
        .catch((e: unknown) => e)) as PublishQueueFullError;
      expect(refused).toBeInstanceOf(PublishQueueFullError);
      expect(refused).toBeInstanceOf(DatabaseUnavailableError);
      expect(refused.message).toMatch(/2 publishes are already waiting.*"third"/);
      release();
      await Promise.all(held);
      await bus.publish('t', 4); // room again
      expect(db.appends.flatMap((a) => a.ids)).toHaveLength(3);
    },
  );
});
