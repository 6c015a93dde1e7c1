import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
// The compiled helpers: startPostgres forks its keeper process from the built file next to it.
import {
  freePort,
  migrateDatabase,
  startPostgres,
  type RunningPostgres,
} from '../libs/cyclium/dist/testing/index.js';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import { FAST_RECOVERY } from './support/demo-cluster.js';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

const DEMO_MAIN = fileURLToPath(new URL('../apps/demo/dist/main.js', import.meta.url));

/** How long the database stays down after the node first finds it down (the claim is measured with 30 s). */
const OUTAGE_MS = Number(process.env.CYCLIUM_TEST_BOOT_OUTAGE_MS ?? 6_000);

/** The boot steps that touch the database, each by a statement only it sends. */
const BOOT_STEPS: ReadonlyArray<[step: string, statement: string]> = [
  ['checking the schema', `to_regclass('cyclium_episodes')`],
  ['recording the actor definitions', 'INSERT INTO cyclium_actor_scopes'],
  ['starting the bus (LISTEN)', 'LISTEN "'],
  ['registering the node', 'INSERT INTO cyclium_nodes'],
  [
    'reading the queued backlog',
    `SELECT DISTINCT actor_id FROM cyclium_episodes WHERE status = 'queued'`,
  ],
];

const ready = async (node: DemoNode) =>
  fetch(`http://127.0.0.1:${node.port}/health/ready`).then(
    (r) => r.status === 200,
    () => false,
  );

/**
 * A demo node (a real process) boots through a database failover: it waits for a server that is
 * down when it starts, and for one that goes away again at each later step of boot, and becomes
 * ready without exiting. This file stops and starts a PostgreSQL of its own (the shared test
 * server must stay up for the other files).
 */
describe('a node boots through a database failover', () => {
  let dataRoot: string;
  let port: number;
  let server: RunningPostgres | undefined;
  let url: string;
  const nodes: DemoNode[] = [];
  const proxies: TcpProxy[] = [];

  const startServer = async () => {
    server = await startPostgres({ dataDir: join(dataRoot, 'pgdata'), port, persistent: true });
  };

  const bootNode = (id: string, databaseUrl: string, onOutput?: (chunk: string) => void) =>
    startNodeProcess(DEMO_MAIN, databaseUrl, {
      env: { ...FAST_RECOVERY, CYCLIUM_NODE_ID: id, DEMO_STARTUP_WAIT_MS: '90000' },
      ready,
      readyTimeoutMs: OUTAGE_MS + 60_000,
      onOutput,
    }).then((node) => {
      nodes.push(node);
      return node;
    });

  beforeAll(async () => {
    dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-boot-failover-'));
    port = await freePort();
    await startServer();
    url = (server as RunningPostgres).url;
    await migrateDatabase(url);
    await migrateDemoDatabase(url);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    await Promise.all(proxies.map((proxy) => proxy.close()));
    await server?.stop();
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
  });

  it('started while the database is down, it waits (a line per attempt, slowing), ready once it is back', async () => {
    await (server as RunningPostgres).stop();
    server = undefined;
    let output = '';
    let firstRefusedAt: number | undefined;
    const booting = bootNode('boot-waiter', url, (chunk) => {
      output += chunk;
      if (firstRefusedAt === undefined && waiting().length > 0) firstRefusedAt = Date.now();
    });
    booting.catch(() => undefined); // awaited below; this only keeps an early failure from being unhandled meanwhile
    const waiting = () =>
      output.split('\n').filter((line) => line.includes('the database is not available yet'));
    // The outage is the fault's length, not a synchronisation: the node must still be waiting at its end.
    const outageOver = () =>
      firstRefusedAt !== undefined && Date.now() - firstRefusedAt >= OUTAGE_MS;
    const gaveUp = () => output.split('\n').find((line) => line.includes('could not start'));
    await Promise.race([
      waitFor(
        'the outage to last its length',
        () => outageOver() || gaveUp(),
        OUTAGE_MS + 30_000,
        100,
      ),
      booting.then(() =>
        Promise.reject(new Error('the node was ready while the database was down')),
      ),
    ]);
    expect(gaveUp()).toBeUndefined();
    await startServer();
    const upAt = Date.now();
    const node = await booting;
    const readyAfterMs = Date.now() - upAt;
    expect([node.process.exitCode, node.process.signalCode]).toEqual([null, null]);
    const lines = waiting();
    expect(lines[0]).toMatch(
      /^.*connecting \(user postgres at 127\.0\.0\.1:\d+, database postgres\): the database is/,
    );
    expect(lines[0]).toMatch(
      /waited [\d.]+ s, trying again in 1 s, until \S+Z \(startupWaitMs 90000\)/,
    );
    // One line per attempt, 1 s doubling to 10 s apart.
    const pauses = [...lines.join('\n').matchAll(/trying again in (\d+) s/g)].map((m) =>
      Number(m[1]),
    );
    expect(pauses).toEqual([1, 2, 4, 8, 10, 10, 10, 10, 10, 10, 10, 10].slice(0, pauses.length));
    expect(pauses.length).toBeGreaterThanOrEqual(3);
    expect(output).not.toMatch(/could not start/);
    process.stdout.write(
      `boot-failover: database down ${upAt - (firstRefusedAt as number)} ms after the node's first attempt, ` +
        `${lines.length} waiting lines, ready ${readyAfterMs} ms after it came back, the node never exited\n`,
    );
  }, 180_000);

  it('the database goes away again at each later step of boot: the node waits each out and becomes ready', async () => {
    const cuts: string[] = [];
    let down = false;
    const proxy = await TcpProxy.start({
      target: url,
      onClientData: (chunk) => {
        if (down) return 'drop-and-close';
        const text = chunk.toString('latin1');
        const step = BOOT_STEPS.find(
          ([name, statement]) => !cuts.includes(name) && text.includes(statement),
        );
        if (!step) return 'forward';
        // The statement never reaches the server; every connection drops and new ones fail for 0.9 s.
        cuts.push(step[0]);
        down = true;
        setTimeout(() => (down = false), 900);
        proxy.dropAll();
        return 'drop-and-close';
      },
    });
    proxies.push(proxy);
    const node = await bootNode('boot-through-cuts', proxy.url(url));
    expect([...cuts].sort()).toEqual(BOOT_STEPS.map(([name]) => name).sort());
    for (const [name] of BOOT_STEPS)
      expect(node.output()).toContain(`${name}: the database is not available yet`);
    expect([node.process.exitCode, node.process.signalCode]).toEqual([null, null]);
    expect((await node.get<{ identity: string }>('/node')).identity).toBe('boot-through-cuts');
  }, 120_000);
});
