import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '@cyclium/nestjs/testing';
import { waitFor } from './support/wait-for.js';

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
    const rest = await Promise.all(Array.from({ length: count - 1 }, (_, i) => canListen(base + i + 1)));
    if (rest.every(Boolean)) return base;
  }
}

describe('npm start launcher', () => {
  let launcher: ChildProcess | undefined;
  let dataRoot: string | undefined;

  afterAll(async () => {
    if (launcher && launcher.exitCode === null) launcher.kill('SIGKILL');
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
  });

  it('starts its own PostgreSQL and three healthy nodes, and on SIGINT stops the nodes before the database', async () => {
    dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-launcher-'));
    const basePort = await consecutiveFreePorts(3);
    const env = { ...process.env };
    delete env.DATABASE_URL;
    const child = spawn(
      process.execPath,
      [LAUNCHER, '--nodes', '3', '--base-port', String(basePort), '--data-dir', join(dataRoot, 'pgdata')],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    launcher = child;
    let output = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

    await waitFor('the cluster to come up', () => output.includes('cluster up: 3 nodes'), 60_000, 100);
    for (let i = 0; i < 3; i++) {
      const health = await fetch(`http://127.0.0.1:${basePort + i}/health`);
      expect(health.status).toBe(200);
      const node = (await (await fetch(`http://127.0.0.1:${basePort + i}/node`)).json()) as { identity: string };
      expect(node.identity).toBe(`node-${i + 1}`);
    }
    expect(existsSync(join(dataRoot, 'pgdata', 'PG_VERSION'))).toBe(true);

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    const order = ['stopping nodes (SIGTERM)', 'stopping PostgreSQL', 'stopped'].map((line) => output.indexOf(line));
    expect(order.every((at) => at >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    for (let i = 0; i < 3; i++) {
      await expect(fetch(`http://127.0.0.1:${basePort + i}/health`)).rejects.toThrow();
    }
    // Persistent data survives the stop, so the next npm start finds its episodes again.
    expect(existsSync(join(dataRoot, 'pgdata', 'PG_VERSION'))).toBe(true);
  }, 120_000);
});
