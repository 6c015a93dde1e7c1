/**
 * `npm start`: a local Cyclium cluster. Starts embedded PostgreSQL unless DATABASE_URL is set,
 * applies Cyclium's migrations and the demo's own, then runs N demo nodes with distinct
 * CYCLIUM_NODE_IDs on ports from 3000. Ctrl-C stops the nodes with SIGTERM (so they drain), then
 * the database.
 */
import { migrateDatabase, startPostgres, type RunningPostgres } from '@cyclium/nestjs/testing';
import { mkdir, readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { migrateDemoDatabase } from './database/migrate-demo.js';
import { LauncherError, lockDataDir } from './launcher/data-dir-lock.js';
import { NodeSupervisor } from './launcher/node-supervisor.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '3' },
    'base-port': { type: 'string', default: '3000' },
    'data-dir': { type: 'string', default: '.cyclium/pgdata' },
    'trigger-only': { type: 'string', default: '0' },
  },
});
const say = (line: string) => process.stdout.write(`[launcher] ${line}\n`);
const refuse = (line: string): never => {
  process.stderr.write(`[launcher] ${line}\n`);
  process.exit(1);
};
const nodeCount = Number(values.nodes);
const basePort = Number(values['base-port']);
if (!Number.isInteger(nodeCount) || nodeCount < 1)
  refuse(`--nodes must be a whole number >= 1 (got ${values.nodes})`);
const triggerOnly = Number(values['trigger-only']);
if (!Number.isInteger(triggerOnly) || triggerOnly < 0 || triggerOnly > nodeCount) {
  refuse(`--trigger-only must be a whole number from 0 to --nodes (got ${values['trigger-only']})`);
}

async function main(): Promise<void> {
  let database: RunningPostgres | undefined;
  let unlock: (() => Promise<void>) | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    const dataDir = resolve(values['data-dir']);
    await mkdir(dirname(dataDir), { recursive: true });
    unlock = await lockDataDir(dataDir, values['data-dir']);
    say(`starting embedded PostgreSQL (data in ${values['data-dir']})`);
    database = await startPostgres({ dataDir, persistent: true }).catch(async (error: unknown) => {
      await unlock?.();
      throw error;
    });
    url = database.url;
    // The server's own pid (postmaster.pid's first line), for the faults the guide walks through.
    const pid = (await readFile(resolve(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0];
    say(`PostgreSQL is up, pid ${pid} (kill -STOP ${pid} freezes it, kill -CONT ${pid} thaws it)`);
  }
  if (!URL.canParse(url) || !['postgres:', 'postgresql:'].includes(new URL(url).protocol)) {
    throw new LauncherError('DATABASE_URL is not a postgres:// or postgresql:// connection URL');
  }
  say(`database ${url.replace(/:[^:@/]*@/, ':***@')}`);
  await migrateDatabase(url).catch((error: Error & { code?: string }) => {
    // A wrong password or database: the server's own words name it, the stack would not.
    throw typeof error.code === 'string'
      ? new LauncherError(`could not migrate the database: ${error.message}`)
      : error;
  });
  await migrateDemoDatabase(url);
  say('migrations applied');

  // A node booting while the database is away waits for it (startupWaitMs) rather than exiting:
  // give it that long, and a minute more to boot, before calling it unhealthy.
  const bootDeadlineMs = Number(process.env.DEMO_STARTUP_WAIT_MS ?? 120_000) + 60_000;
  const entry = fileURLToPath(new URL('./main.js', import.meta.url));
  const supervisor = new NodeSupervisor(
    entry,
    say,
    () => {
      // With every node left down there is no cluster to serve: stop the database and say so.
      say('every node has exited');
      void stopAll(1);
    },
    bootDeadlineMs,
  );
  let stopping = false;
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say('stopping nodes (SIGTERM)');
    await supervisor.stop();
    if (database) {
      say('stopping PostgreSQL');
      await database.stop();
    }
    await unlock?.();
    say('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));

  const modeOf = (i: number) => (i >= nodeCount - triggerOnly ? 'trigger_only' : 'full');
  supervisor.start(
    Array.from({ length: nodeCount }, (_, i) => ({
      id: `node-${i + 1}`,
      port: basePort + i,
      env: {
        ...process.env,
        DATABASE_URL: url,
        PORT: String(basePort + i),
        CYCLIUM_NODE_ID: `node-${i + 1}`,
        // The last N nodes defer their episodes to the full ones.
        ...(modeOf(i) === 'trigger_only' ? { CYCLIUM_MODE: 'trigger_only' } : {}),
        ...(process.stdout.isTTY ? {} : { NO_COLOR: '1' }),
      },
    })),
  );
  const failures = await supervisor.waitHealthy(bootDeadlineMs);
  if (failures.length > 0) {
    for (const failure of failures) say(failure);
    say(`${failures.length} of ${nodeCount} node(s) failed to start; stopping`);
    await stopAll(1);
    return;
  }
  supervisor.restartOnExit();
  for (let i = 0; i < nodeCount; i++) {
    const id = `node-${i + 1}`;
    say(
      `${id} (${modeOf(i)}, pid ${supervisor.pid(id)}) on http://127.0.0.1:${basePort + i}: operations page http://127.0.0.1:${basePort + i}/ops`,
    );
  }
  if (database) say(`database shell: psql ${database.url}`);
  say(
    'a node that exits is restarted (at most 5 times a minute); to restart one by hand: kill <its pid> (it drains first)',
  );
  say(
    'a node that boots while the database is away (a failover) waits for it, up to DEMO_STARTUP_WAIT_MS (120 s)',
  );
  say(`cluster up: ${nodeCount} nodes. Ctrl-C to stop.`);
}

main().catch((error: unknown) => {
  // Our own refusals are one line; anything else keeps its stack.
  refuse(
    error instanceof Error
      ? ((error instanceof LauncherError ? error.message : error.stack) ?? error.message)
      : String(error),
  );
});
