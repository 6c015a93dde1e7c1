import type pg from 'pg';

const guarded = new WeakSet<pg.Pool>();

/**
 * pg emits 'error' on a client whose connection ends. pg-pool listens only while the client is
 * idle, and whoever borrows it attaches a listener only once it holds it, a microtask later: a
 * FATAL (`pg_terminate_backend`, a restart) read in the same chunk as a new connection's readiness
 * finds no listener and ends the process. Every client of `pool` gets one listener from its first
 * moment; the borrower still learns of the loss at its next statement, and an idle client still
 * leaves the pool.
 */
export function keepClientErrorsHandled(pool: pg.Pool): void {
  if (guarded.has(pool)) return;
  guarded.add(pool);
  pool.on('connect', (client) => client.on('error', () => undefined));
}
