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
  },
});
const nodeCount = Number(values.nodes);
const basePort = Number(values['base-port']);
if (!Number.isInteger(nodeCount) || nodeCount < 1) throw new Error(`--nodes must be a whole number >= 1 (got ${values.nodes})`);

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

async function waitHealthy(port: number, node: ChildProcess, deadlineMs: number): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (node.exitCode !== null) throw new Error(`node on port ${port} exited with code ${node.exitCode}`);
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`node on port ${port} was not healthy within ${deadlineMs} ms`);
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
        ...(process.stdout.isTTY ? {} : { NO_COLOR: '1' }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    prefixLines(node.stdout, `[${id}]`, process.stdout);
    prefixLines(node.stderr, `[${id}]`, process.stderr);
    node.on('exit', (code, signal) => {
      if (!stopping) say(`${id} exited unexpectedly (${signal ?? `code ${code}`})`);
    });
    nodes.push(node);
  }
  try {
    await Promise.all(nodes.map((node, i) => waitHealthy(basePort + i, node, 60_000)));
  } catch (error) {
    say((error as Error).message);
    await stopAll(1);
    return;
  }
  for (let i = 0; i < nodeCount; i++) say(`node-${i + 1} listening on http://127.0.0.1:${basePort + i} (GET /health)`);
  say(`cluster up: ${nodeCount} nodes. Ctrl-C to stop.`);
}

main().catch((error: unknown) => {
  process.stderr.write(`[launcher] ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
