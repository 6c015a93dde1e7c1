/**
 * `npm start`: a local Cyclium cluster. Starts embedded PostgreSQL unless DATABASE_URL is set,
 * applies Cyclium's migrations and the demo's own, then runs N demo nodes with distinct
 * CYCLIUM_NODE_IDs on ports from 3000. Ctrl-C stops the nodes with SIGTERM (so they drain), then
 * the database.
 */
import { migrateDatabase, startPostgres, type RunningPostgres } from '@cyclium/nestjs/testing';
import { spawn, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { migrateDemoDatabase } from './database/migrate-demo.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '3' },
    'base-port': { type: 'string', default: '3000' },
    'data-dir': { type: 'string', default: '.cyclium/pgdata' },
    'trigger-only': { type: 'string', default: '0' },
  },
});
const nodeCount = Number(values.nodes);
const basePort = Number(values['base-port']);
if (!Number.isInteger(nodeCount) || nodeCount < 1) throw new Error(`--nodes must be a whole number >= 1 (got ${values.nodes})`);
const triggerOnly = Number(values['trigger-only']);
if (!Number.isInteger(triggerOnly) || triggerOnly < 0 || triggerOnly > nodeCount) {
  throw new Error(`--trigger-only must be a whole number from 0 to --nodes (got ${values['trigger-only']})`);
}

const say = (line: string) => process.stdout.write(`[launcher] ${line}\n`);

function prefixLines(stream: NodeJS.ReadableStream | null, prefix: string, out: NodeJS.WritableStream): void {
  let pending = '';
  stream?.setEncoding('utf8');
  stream?.on('data', (chunk: string) => {
    const lines = (pending + chunk).split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) out.write(`${prefix} ${line}\n`);
  });
}

/**
 * Healthy means *this* child answers: /node must report its identity and pid, so a stale process
 * still holding the port (a previous cluster, say) cannot pass for a node that failed to bind.
 */
async function waitHealthy(id: string, port: number, node: ChildProcess, deadlineMs: number): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (node.exitCode !== null || node.signalCode !== null) {
      throw new Error(`${id} (port ${port}) failed to start: it exited with ${node.signalCode ?? `code ${node.exitCode}`} (see its log above)`);
    }
    const healthy = await fetch(`http://127.0.0.1:${port}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (healthy) {
      const who = await fetch(`http://127.0.0.1:${port}/node`)
        .then((r) => r.json() as Promise<{ identity?: string; pid?: number }>)
        .catch(() => ({}) as { identity?: string; pid?: number });
      if (who.identity === id && who.pid === node.pid) return;
      if (who.pid !== undefined && who.pid !== node.pid) {
        throw new Error(`${id} could not take port ${port}: another process (pid ${who.pid}, ${who.identity ?? 'unknown'}) answers there`);
      }
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${id} (port ${port}) was not healthy within ${deadlineMs} ms`);
}

async function main(): Promise<void> {
  let database: RunningPostgres | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    say(`starting embedded PostgreSQL (data in ${values['data-dir']})`);
    database = await startPostgres({ dataDir: values['data-dir'], persistent: true });
    url = database.url;
  }
  say(`database ${url.replace(/:[^:@/]*@/, ':***@')}`);
  await migrateDatabase(url);
  await migrateDemoDatabase(url);
  say('migrations applied');

  const nodes: ChildProcess[] = [];
  let stopping = false;
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say('stopping nodes (SIGTERM)');
    await Promise.all(
      nodes.map(
        (node) =>
          new Promise<void>((done) => {
            if (node.exitCode !== null || node.signalCode !== null) return done();
            const kill = setTimeout(() => node.kill('SIGKILL'), 20_000);
            node.once('exit', () => {
              clearTimeout(kill);
              done();
            });
            node.kill('SIGTERM');
          }),
      ),
    );
    if (database) {
      say('stopping PostgreSQL');
      await database.stop();
    }
    say('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));

  const entry = new URL('./main.js', import.meta.url);
  for (let i = 0; i < nodeCount; i++) {
    const id = `node-${i + 1}`;
    const port = basePort + i;
    // Detached: a terminal's Ctrl-C reaches only the launcher, which then stops the nodes in order.
    const node = spawn(process.execPath, [entry.pathname], {
      env: {
        ...process.env,
        DATABASE_URL: url,
        PORT: String(port),
        CYCLIUM_NODE_ID: id,
        // The last N nodes defer their episodes to the full ones.
        ...(i >= nodeCount - triggerOnly ? { CYCLIUM_MODE: 'trigger_only' } : {}),
        ...(process.stdout.isTTY ? {} : { NO_COLOR: '1' }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    prefixLines(node.stdout, `[${id}]`, process.stdout);
    prefixLines(node.stderr, `[${id}]`, process.stderr);
    node.on('exit', (code, signal) => {
      if (stopping) return;
      say(`${id} exited unexpectedly (${signal ?? `code ${code}`})`);
      // With every node gone there is no cluster left to serve: stop the database and say so.
      if (nodes.every((n) => n.exitCode !== null || n.signalCode !== null)) {
        say('every node has exited');
        void stopAll(1);
      }
    });
    nodes.push(node);
  }
  const started = await Promise.allSettled(nodes.map((node, i) => waitHealthy(`node-${i + 1}`, basePort + i, node, 60_000)));
  const failures = started.flatMap((result) => (result.status === 'rejected' ? [(result.reason as Error).message] : []));
  if (failures.length > 0) {
    for (const failure of failures) say(failure);
    say(`${failures.length} of ${nodeCount} node(s) failed to start; stopping`);
    await stopAll(1);
    return;
  }
  for (let i = 0; i < nodeCount; i++) {
    const mode = i >= nodeCount - triggerOnly ? 'trigger_only' : 'full';
    say(`node-${i + 1} (${mode}) listening on http://127.0.0.1:${basePort + i} (GET /health)`);
  }
  say(`cluster up: ${nodeCount} nodes. Ctrl-C to stop.`);
}

main().catch((error: unknown) => {
  process.stderr.write(`[launcher] ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
