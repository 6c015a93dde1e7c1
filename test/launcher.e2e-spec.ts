import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './support/free-port.js';
import { freshDatabase } from './support/database.js';
import { waitFor, waitWhileRunning } from './support/wait-for.js';

const LAUNCHER = fileURLToPath(new URL('../apps/demo/dist/launcher.js', import.meta.url));

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A base port whose next `count - 1` neighbours are free too (the launcher uses base, base+1, ...). */
async function consecutiveFreePorts(count: number): Promise<number> {
  for (;;) {
    const base = await freePort();
    const rest = await Promise.all(
      Array.from({ length: count - 1 }, (_, i) => canListen(base + i + 1)),
    );
    if (rest.every(Boolean)) return base;
  }
}

/** Runs the launcher against `DATABASE_URL` (or its own PostgreSQL when undefined), collecting its output. */
function runLauncher(
  args: string[],
  databaseUrl: string | undefined,
  extraEnv: Record<string, string> = {},
) {
  const env = { ...process.env, ...extraEnv };
  if (databaseUrl === undefined) delete env.DATABASE_URL;
  else env.DATABASE_URL = databaseUrl;
  const child = spawn(process.execPath, [LAUNCHER, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  );
  /** Waits for `cluster up: <n> nodes`; a launcher that exits first fails at once. */
  const clusterUp = (nodes: number) =>
    waitWhileRunning(
      `the launcher to print "cluster up: ${nodes} nodes"`,
      child,
      () => output,
      () => output.includes(`cluster up: ${nodes} nodes`),
      90_000,
    );
  return { child, exited, output: () => output, clusterUp };
}

describe('npm start launcher', () => {
  let launcher: ChildProcess | undefined;
  let dataRoot: string | undefined;
  let squatter: Server | undefined;
  const orphans: number[] = [];

  afterAll(async () => {
    if (launcher && launcher.exitCode === null) launcher.kill('SIGKILL');
    for (const pid of orphans) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    squatter?.close();
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
  });

  it('starts its own PostgreSQL and three healthy nodes, and on SIGINT stops the nodes before the database', async () => {
    dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-launcher-'));
    const basePort = await consecutiveFreePorts(3);
    const run = runLauncher(
      [
        '--nodes',
        '3',
        '--trigger-only',
        '1',
        '--base-port',
        String(basePort),
        '--data-dir',
        join(dataRoot, 'pgdata'),
      ],
      undefined,
    );
    const { child, exited } = run;
    launcher = child;

    await run.clusterUp(3);
    for (let i = 0; i < 3; i++) {
      const health = await fetch(`http://127.0.0.1:${basePort + i}/health`);
      expect(health.status).toBe(200);
      const node = (await (await fetch(`http://127.0.0.1:${basePort + i}/node`)).json()) as {
        identity: string;
      };
      expect(node.identity).toBe(`node-${i + 1}`);
      // --trigger-only 1: the last node defers its episodes to the two full ones.
      const mode = (await (await fetch(`http://127.0.0.1:${basePort + i}/mode`)).json()) as {
        nodeMode: string;
      };
      expect(mode.nodeMode).toBe(i === 2 ? 'trigger_only' : 'full');
    }
    expect(existsSync(join(dataRoot, 'pgdata', 'PG_VERSION'))).toBe(true);
    // It names PostgreSQL's own pid, a live process while the cluster runs.
    const postgresPid = Number(/PostgreSQL is up, pid (\d+)/.exec(run.output())?.[1]);
    expect(postgresPid).toBeGreaterThan(0);
    expect(process.kill(postgresPid, 0)).toBe(true);
    expect(run.output()).toMatch(
      /database shell: psql postgres:\/\/postgres:postgres@127\.0\.0\.1:\d+\/postgres/,
    );

    // A second npm start on the same data folder says who holds it, instead of PostgreSQL's `undefined`.
    const second = runLauncher(
      [
        '--nodes',
        '1',
        '--base-port',
        String(await freePort()),
        '--data-dir',
        join(dataRoot, 'pgdata'),
      ],
      undefined,
    );
    expect(await second.exited).toBe(1);
    expect(second.output().trim()).toBe(
      `[launcher] the data folder ${join(dataRoot, 'pgdata')} is in use by another npm start (pid ${child.pid}); stop it or pass --data-dir`,
    );

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    // Stopped with the launcher: that pid is gone.
    await waitFor(
      `PostgreSQL (pid ${postgresPid}) to be gone`,
      () => {
        try {
          return !process.kill(postgresPid, 0);
        } catch {
          return true;
        }
      },
      10_000,
      100,
    );
    const output = run.output();
    const order = ['stopping nodes (SIGTERM)', 'stopping PostgreSQL', 'stopped'].map((line) =>
      output.indexOf(line),
    );
    expect(order.every((at) => at >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    for (let i = 0; i < 3; i++) {
      await expect(fetch(`http://127.0.0.1:${basePort + i}/health`)).rejects.toThrow();
    }
    // Persistent data survives the stop, so the next npm start finds its episodes again.
    expect(existsSync(join(dataRoot, 'pgdata', 'PG_VERSION'))).toBe(true);
  }, 180_000);

  it('reports a node that could not take its port, instead of claiming the cluster is up, and exits non-zero', async () => {
    const basePort = await consecutiveFreePorts(3);
    // A stale process on the second port that even answers /health like a node would.
    squatter = createHttpServer((request, response) => {
      response.setHeader('content-type', 'application/json');
      response.end(
        request.url === '/node'
          ? JSON.stringify({ identity: 'node-2', pid: 1 })
          : JSON.stringify({ status: 'ok' }),
      );
    });
    await new Promise<void>((resolve) => squatter?.listen(basePort + 1, '127.0.0.1', resolve));
    const run = runLauncher(
      ['--nodes', '3', '--base-port', String(basePort)],
      await freshDatabase(),
    );
    launcher = run.child;
    expect(await run.exited).toBe(1);
    expect(run.output()).not.toContain('cluster up');
    expect(run.output()).toMatch(/node-2 (failed to start|could not take port)/);
    expect(run.output()).toContain('1 of 3 node(s) failed to start');
    squatter.close();
    squatter = undefined;
  }, 120_000);

  it('restarts a node killed with SIGKILL under the same identity, and says so', async () => {
    const basePort = await consecutiveFreePorts(2);
    // A 1 s beat: the node's next process waits at most two beats to tell the killed one from a twin.
    const run = runLauncher(
      ['--nodes', '2', '--base-port', String(basePort)],
      await freshDatabase(),
      { DEMO_NODE_BEAT_MS: '1000' },
    );
    launcher = run.child;
    await run.clusterUp(2);
    const before = (await (await fetch(`http://127.0.0.1:${basePort}/node`)).json()) as {
      pid: number;
    };
    orphans.push(before.pid);
    expect(run.output()).toContain(
      `node-1 (full, pid ${before.pid}) on http://127.0.0.1:${basePort}: operations page http://127.0.0.1:${basePort}/ops`,
    );
    expect(run.output()).toContain('to restart one by hand: kill <its pid>');
    process.kill(before.pid, 'SIGKILL');
    const after = await waitFor<{ identity: string; pid: number } | null>(
      'node-1 to answer again from a new process',
      async () => {
        const node = (await (await fetch(`http://127.0.0.1:${basePort}/node`)).json()) as {
          identity: string;
          pid: number;
        };
        return node.pid !== before.pid ? node : null;
      },
      30_000,
      200,
    );
    if (!after) throw new Error('unreachable: waitFor returns a truthy value');
    orphans.push(after.pid);
    expect(after.identity).toBe('node-1');
    expect(run.output()).toContain('node-1 exited (SIGKILL); restarting it in 1 s');
    // What the silent seconds after it are: the new process waits out the old one's beat.
    expect(run.output()).toContain(
      "node-1's new process waits up to 2 s (two node beats) for the old one's beat to stop",
    );
    // Nest's boot lines stay out of the launcher's output.
    expect(run.output()).not.toMatch(/LOG \[(RouterExplorer|InstanceLoader)\]/);
    run.child.kill('SIGINT');
    expect(await run.exited).toBe(0);
  }, 180_000);
});
