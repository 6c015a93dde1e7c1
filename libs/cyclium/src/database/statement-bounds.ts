import type pg from 'pg';
import { DatabaseTimeoutError, DatabaseUnavailableError } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';

export interface StatementLimits {
  /** How long the library waits for a connection from a pool. */
  readonly checkoutTimeoutMs: number;
  /** How long the library waits for the answer to one statement it sent. */
  readonly queryTimeoutMs: number;
}

/** pg's message when a query's `query_timeout` passes with no answer. */
const READ_TIMEOUT = 'Query read timeout';

/**
 * A client checked out for the library: its statements bounded, and whether it must be discarded.
 */
export interface BoundedClient {
  readonly sql: SqlExecutor;
  /**
   * Why the connection cannot go back to the pool (a timed-out statement, an 'error'); undefined
   * while it can.
   */
  readonly broken: Error | undefined;
  /** Gives the connection back, or discards it when broken (or when `error` is given). */
  release(error?: Error): void;
}

/**
 * Client-side bounds on the library's own use of a pool, so a database that stops answering (its
 * processes stopped, a network path that drops packets silently) fails the caller instead of
 * hanging it. A server-side `statement_timeout` cannot do this: a frozen server never sends the
 * error. Nothing here changes the pool's settings, so the host's own queries keep theirs.
 */
export class StatementBounds {
  constructor(private readonly limits: StatementLimits) {}

  /**
   * One statement on a connection of its own, like `pool.query`, but within checkout + query
   * timeout.
   */
  async query(pool: pg.Pool, args: unknown[]): Promise<pg.QueryResult> {
    const client = await this.checkout(pool);
    try {
      return await client.sql.query(...(args as [never]));
    } finally {
      client.release();
    }
  }

  /**
   * A connection from `pool` within the checkout timeout. One that arrives later goes straight
   * back: the host's pool keeps its own `connectionTimeoutMillis` (often none), so the wait is
   * raced here.
   */
  async checkout(pool: pg.Pool): Promise<BoundedClient> {
    const { checkoutTimeoutMs } = this.limits;
    // An idle connection for every waiter: the pool hands one over on its next turn, nothing to
    // time.
    if (pool.idleCount > pool.waitingCount) return this.bound(await pool.connect());
    const connecting = pool.connect();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>(
      (resolve) => (timer = setTimeout(() => resolve('timeout'), checkoutTimeoutMs)),
    );
    let client: pg.PoolClient | 'timeout';
    try {
      client = await Promise.race([connecting, timedOut]);
    } finally {
      clearTimeout(timer);
    }
    if (client === 'timeout') {
      connecting.then(
        (late) => late.release(),
        () => undefined, // the pool's own error for a connection nobody waits for any more
      );
      throw new DatabaseTimeoutError(
        'cyclium: no database connection within checkoutTimeoutMs',
        new Error(`no connection from the pool within ${checkoutTimeoutMs} ms; nothing was sent`),
      );
    }
    return this.bound(client);
  }

  private bound(client: pg.PoolClient): BoundedClient {
    const { queryTimeoutMs } = this.limits;
    let broken: Error | undefined;
    // pg emits 'error' on a checked-out client whose server went away; with no listener the process
    // ends.
    const onError = (error: Error) => (broken ??= error);
    client.on('error', onError);
    const sql: SqlExecutor = {
      query: async (...args: unknown[]) => {
        if (broken)
          throw new DatabaseUnavailableError(
            'cyclium: the connection broke earlier in this unit of work',
            broken,
          );
        try {
          return await client.query(withTimeout(args, queryTimeoutMs));
        } catch (error) {
          if (!(error instanceof Error && error.message === READ_TIMEOUT)) throw error;
          // The statement may still run (or have run) on the server: the connection's state is
          // unknown, so it is discarded, and the caller learns that the outcome is unknown.
          broken ??= error;
          throw new DatabaseTimeoutError(
            'cyclium: no answer from the database within queryTimeoutMs',
            new Error(
              `no answer within ${queryTimeoutMs} ms; whether the statement took effect is unknown`,
              { cause: error },
            ),
          );
        }
      },
    } as SqlExecutor;
    return {
      sql,
      get broken() {
        return broken;
      },
      release: (error?: Error) => {
        client.removeListener('error', onError);
        client.release(error ?? broken);
      },
    };
  }
}

/** The statement as a QueryConfig carrying pg's client-side `query_timeout`. */
function withTimeout(args: unknown[], queryTimeoutMs: number): pg.QueryConfig {
  const [first, values] = args;
  const config: pg.QueryConfig =
    typeof first === 'string'
      ? { text: first, values: values as unknown[] | undefined }
      : { ...(first as pg.QueryConfig) };
  return Object.assign(config, { query_timeout: queryTimeoutMs });
}
