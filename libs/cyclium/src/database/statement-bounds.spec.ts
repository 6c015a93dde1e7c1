import { EventEmitter } from 'node:events';
import { describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { DatabaseTimeoutError, isDatabaseUnavailable } from '../sql/database-errors.js';
import { StatementBounds } from './statement-bounds.js';

/**
 * A checked-out client that answers, or (like pg past `query_timeout`) fails with 'Query read
 * timeout'.
 */
class FakeClient extends EventEmitter {
  readonly sent: Array<{ text: string; query_timeout?: number }> = [];
  released: Array<Error | undefined> = [];

  constructor(private readonly answers: (text: string) => 'ok' | 'timeout') {
    super();
  }

  async query(config: { text: string; query_timeout?: number }) {
    this.sent.push(config);
    if (this.answers(config.text) === 'timeout') throw new Error('Query read timeout');
    return { rows: [], rowCount: 0 };
  }

  release(error?: Error) {
    this.released.push(error);
  }
}

function poolOf(connect: () => Promise<FakeClient>): pg.Pool {
  return { connect, options: { max: 10 } } as unknown as pg.Pool;
}

const bounds = new StatementBounds({ checkoutTimeoutMs: 30, queryTimeoutMs: 40 });

describe('StatementBounds', () => {
  it(
    "sends each statement with pg's query_timeout and hands a healthy connection " + 'back',
    async () => {
      const client = new FakeClient(() => 'ok');
      await bounds.query(
        poolOf(async () => client),
        ['SELECT $1', [1]],
      );
      expect(client.sent).toEqual([{ text: 'SELECT $1', values: [1], query_timeout: 40 }]);
      expect(client.released).toEqual([undefined]);
      expect(client.listenerCount('error')).toBe(0);
    },
  );

  it(
    'discards a connection whose statement timed out, and says the outcome is ' + 'unknown',
    async () => {
      const client = new FakeClient(() => 'timeout');
      const failure = await bounds
        .query(
          poolOf(async () => client),
          [{ name: 'cyclium_x', text: 'UPDATE x', values: [] }],
        )
        .catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(DatabaseTimeoutError);
      expect(isDatabaseUnavailable(failure)).toBe(true);
      expect(String((failure as Error).message)).toMatch(/queryTimeoutMs.*took effect is unknown/);
      expect(client.sent[0]).toMatchObject({ name: 'cyclium_x', query_timeout: 40 });
      expect(client.released).toEqual([expect.objectContaining({ message: 'Query read timeout' })]);
    },
  );

  it(
    'gives up on a checkout after checkoutTimeoutMs and hands the connection back when it comes ' +
      'late',
    async () => {
      const client = new FakeClient(() => 'ok');
      let arrive: (() => void) | undefined;
      const pool = poolOf(() => new Promise((resolve) => (arrive = () => resolve(client))));
      const failure = await bounds.query(pool, ['SELECT 1']).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(DatabaseTimeoutError);
      expect(String((failure as Error).message)).toMatch(/checkoutTimeoutMs.*nothing was sent/);
      arrive?.();
      await new Promise((resolve) => setImmediate(resolve));
      expect(client.sent).toEqual([]);
      expect(client.released).toEqual([undefined]);
      expect(pool.options).toEqual({ max: 10 });
    },
  );

  it(
    'refuses further statements on a client that broke in a unit of work, and discards ' + 'it',
    async () => {
      const client = new FakeClient((text) => (text === 'COMMIT' ? 'timeout' : 'ok'));
      const checkedOut = await bounds.checkout(poolOf(async () => client));
      await checkedOut.sql.query('BEGIN');
      await expect(checkedOut.sql.query('COMMIT')).rejects.toBeInstanceOf(DatabaseTimeoutError);
      expect(checkedOut.broken).toBeDefined();
      await expect(checkedOut.sql.query('ROLLBACK')).rejects.toThrow(/broke earlier/);
      checkedOut.release();
      expect(client.sent.map((s) => s.text)).toEqual(['BEGIN', 'COMMIT']);
      expect(client.released).toEqual([expect.objectContaining({ message: 'Query read timeout' })]);
    },
  );

  it("catches an 'error' emitted on a checked-out client, then discards it", async () => {
    const client = new FakeClient(() => 'ok');
    const checkedOut = await bounds.checkout(poolOf(async () => client));
    client.emit('error', new Error('Connection terminated unexpectedly'));
    checkedOut.release();
    expect(client.released).toEqual([
      expect.objectContaining({ message: 'Connection terminated unexpectedly' }),
    ]);
    expect(client.listenerCount('error')).toBe(0);
  });
});
