/**
 * A diagnosis aid, on only with FAULT_NODE_TRACE=1: when a pg client (or pool) emits 'error' with no
 * listener (which ends the process), it first prints who checked that client out of its pool last,
 * and from where, so an unhandled connection error names the code that held the connection.
 */
import pg from 'pg';

type Traced = pg.Client & { fsCheckedOutBy?: string; fsReleased?: boolean };

export function traceUnhandledClientErrors(log: (line: string) => void): void {
  const clientPrototype = pg.Client.prototype as unknown as {
    emit: (event: string, ...args: unknown[]) => boolean;
  };
  const emit = clientPrototype.emit;
  clientPrototype.emit = function (this: Traced, event: string, ...args: unknown[]) {
    if (event === 'error' && this.listenerCount('error') === 0) {
      const error = args[0] instanceof Error ? args[0].message : String(args[0]);
      const state = this.fsReleased ? 'released to its pool' : 'checked out';
      log(
        `UNHANDLED pg client error (${error}); the client was ${state}, last by:\n${this.fsCheckedOutBy ?? '(never)'}`,
      );
    }
    return emit.call(this, event, ...args);
  };
  const poolEmitter = pg.Pool.prototype as unknown as {
    emit: (event: string, ...args: unknown[]) => boolean;
  };
  const poolEmit = poolEmitter.emit;
  poolEmitter.emit = function (this: pg.Pool, event: string, ...args: unknown[]) {
    if (event === 'error' && this.listenerCount('error') === 0) {
      const error = args[0] instanceof Error ? args[0].message : String(args[0]);
      log(`UNHANDLED pg pool error (${error}) on a pool of ${this.options.max ?? '?'} connections`);
    }
    return poolEmit.call(this, event, ...args);
  };
  const poolPrototype = pg.Pool.prototype as unknown as {
    connect: (...args: unknown[]) => Promise<Traced>;
  };
  const connect = poolPrototype.connect;
  poolPrototype.connect = function (this: pg.Pool, ...args: unknown[]) {
    const by = new Error('checked out').stack?.split('\n').slice(2, 12).join('\n');
    const mark = (client: Traced) => {
      client.fsCheckedOutBy = by;
      client.fsReleased = false;
      const release = (client as unknown as { release: (...a: unknown[]) => void }).release;
      (client as unknown as { release: (...a: unknown[]) => void }).release = (...a: unknown[]) => {
        client.fsReleased = true;
        release(...a);
      };
    };
    const callback = args[0];
    if (typeof callback === 'function') {
      return connect.call(
        this,
        (error: unknown, client: Traced, done: (...a: unknown[]) => void) => {
          if (client) mark(client);
          const released = (...a: unknown[]) => {
            if (client) client.fsReleased = true;
            done(...a);
          };
          (callback as (...a: unknown[]) => void)(error, client, client ? released : done);
        },
      );
    }
    return connect.call(this).then((client) => {
      mark(client);
      return client;
    });
  };
}
