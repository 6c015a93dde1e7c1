import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
// The compiled helpers: startPostgres forks its keeper process from the built file next to it.
import {
  freePort,
  migrateDatabase,
  startPostgres,
  type RunningPostgres,
} from '../libs/cyclium/dist/testing/index.js';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, rebalanceOn, startNode, stepsJournaled } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const OUTAGE_MS = 20_000;
const LEASE = { ...FAST_RECOVERY, DEMO_LEASE_SECONDS: '3', DEMO_RECOVERY_INTERVAL_MS: '500' };

/**
 * This file stops and starts a PostgreSQL of its own (the shared test server must stay up for the
 * other files), on a fixed port and data folder, so the nodes reconnect to the same address.
 */
describe('the database stops for 20 s under a running 3-node cluster', () => {
  let dataRoot: string;
  let port: number;
  let server: RunningPostgres | undefined;
  let url: string;
  let db: pg.Pool;
  const nodes: DemoNode[] = [];
  /** The test's publishing client starts new events while this is true... */
  let publishing = false;
  /** ...and gives up even on the one it is retrying once this is (afterAll: the test failed). */
  let abandoned = false;

  const startServer = async () => {
    server = await startPostgres({ dataDir: join(dataRoot, 'pgdata'), port, persistent: true });
  };

  beforeAll(async () => {
    dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-outage-'));
    port = await freePort();
    await startServer();
    url = (server as RunningPostgres).url;
    await migrateDatabase(url);
    await migrateDemoDatabase(url);
    db = new pg.Pool({ connectionString: url, max: 2 });
    db.on('error', () => undefined); // its idle clients die with the server, on purpose
    nodes.push(
      ...(await Promise.all(['node-1', 'node-2', 'node-3'].map((id) => startNode(url, id, LEASE)))),
    );
  }, 120_000);

  afterAll(async () => {
    abandoned = true;
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    await db?.end().catch(() => undefined);
    await server?.stop();
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
  });

  const healthOf = (node: DemoNode) =>
    fetch(`http://127.0.0.1:${node.port}/health`).then(
      (r) => r.status,
      () => 0,
    );

  it('no node exits, every 202 event becomes exactly one episode, running work finishes by its policy, health tells the truth', async () => {
    // Slow rebalances in flight on every node when the database goes: 5 steps of 3 s each.
    const restartable = await Promise.all(
      nodes.flatMap((node, i) =>
        [0, 1].map((j) => rebalanceOn(node, { resource: `blink-r${i}${j}`, stepMs: 3_000 })),
      ),
    );
    const failFast = await rebalanceOn(
      nodes[0] as DemoNode,
      { resource: 'blink-once', stepMs: 3_000 },
      'rebalance_once',
    );
    await waitFor('every rebalance to pass a step', async () =>
      (await Promise.all([...restartable, failFast].map((id) => stepsJournaled(db, id)))).every(
        (steps) => steps.length >= 1,
      ),
    );

    // A client publishing at a steady rate, retrying the same event id (on any node) until it gets 202.
    const accepted = new Set<string>();
    const statuses = new Map<number, number>();
    const unexpected: number[] = [];
    publishing = true;
    let sent = 0;
    const publisher = (async () => {
      for (let i = 0; publishing; i++) {
        const eventId = `blink-${i}`;
        sent++;
        for (let attempt = 0; !abandoned; attempt++) {
          const node = nodes[(i + attempt) % nodes.length] as DemoNode;
          const status = await fetch(`http://127.0.0.1:${node.port}/events`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              type: 'resource.updated',
              eventId,
              payload: { resource: eventId, usage: i % 100 },
            }),
          }).then(
            (r) => r.status,
            () => 0,
          );
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
          if (status === 202) {
            accepted.add(eventId);
            break;
          }
          if (status !== 503 && status !== 0) unexpected.push(status); // unavailable, never a 500
          await new Promise((r) => setTimeout(r, 200));
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    await waitFor('events flowing', () => accepted.size >= 20, 20_000);
    const stoppedAt = Date.now();
    await (server as RunningPostgres).stop();
    server = undefined;

    // While it is away: every node answers /health with 503, and stays alive.
    const unhealthy = new Set<number>();
    await waitFor(
      'every node to report itself unhealthy',
      async () => {
        for (const [i, node] of nodes.entries())
          if ((await healthOf(node)) === 503) unhealthy.add(i);
        return unhealthy.size === nodes.length;
      },
      OUTAGE_MS - 2_000,
      250,
    );
    await waitFor(
      'the rest of the outage',
      () => Date.now() - stoppedAt >= OUTAGE_MS,
      OUTAGE_MS + 1_000,
      250,
    );
    for (const node of nodes)
      expect({
        port: node.port,
        exitCode: node.process.exitCode,
        signal: node.process.signalCode,
      }).toEqual({ port: node.port, exitCode: null, signal: null });

    await startServer();
    const upAt = Date.now();
    await waitFor(
      'every node to be healthy again',
      async () => (await Promise.all(nodes.map(healthOf))).every((s) => s === 200),
      30_000,
      100,
    );
    const backToHealthyMs = Date.now() - upAt;

    await waitFor('events flowing again', () => accepted.size >= 40, 20_000);
    const acceptedBefore = accepted.size;
    await waitFor(
      'a few more events after the outage',
      () => accepted.size >= acceptedBefore + 20,
      20_000,
    );
    publishing = false;
    await publisher;
    expect(unexpected).toEqual([]);
    expect(statuses.get(503)).toBeGreaterThan(0);

    const count = async (sql: string, params: unknown[] = []) =>
      (await db.query(sql, params)).rows[0].n as number;
    await waitFor(
      'every accepted event to be a done episode, and every rebalance to end',
      async () =>
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor' AND status = 'done'`,
        )) >= accepted.size &&
        (await count(
          `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status IN ('running', 'queued')`,
        )) === 0,
      60_000,
      250,
    );

    // Exactly one episode per acknowledged event, and none for an event that was never stored.
    const perEvent = await db.query<{ event_id: string; n: number }>(
      `SELECT trigger_ref->>'eventId' AS event_id, count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor' GROUP BY 1`,
    );
    const episodesByEvent = new Map(perEvent.rows.map((r) => [r.event_id, r.n]));
    for (const eventId of accepted)
      expect({ eventId, episodes: episodesByEvent.get(eventId) }).toEqual({ eventId, episodes: 1 });
    expect(perEvent.rows.every((r) => r.n === 1)).toBe(true);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'resource_monitor' AND status <> 'done'`,
      ),
    ).toBe(0);

    // Running work ended by its declared policy: restart policies done from their checkpoints, the fail policy failed as orphaned.
    const ends = await db.query<{ id: string; status: string; error_class: string | null }>(
      `SELECT id, status, error_class FROM cyclium_episodes WHERE id = ANY($1)`,
      [[...restartable, failFast]],
    );
    for (const row of ends.rows) {
      expect(row).toEqual(
        row.id === failFast
          ? { id: failFast, status: 'failed', error_class: 'orphaned' }
          : { id: row.id, status: 'done', error_class: null },
      );
    }
    // No step ran twice: a step journaled before the outage was not run again after it.
    const repeated = await db.query(
      `SELECT episode_id, step_no, count(*)::int AS n FROM demo_rebalance_log WHERE episode_id = ANY($1) GROUP BY 1, 2 HAVING count(*) > 1`,
      [[...restartable, failFast]],
    );
    expect(repeated.rows).toEqual([]);
    expect(
      await count(`SELECT count(*)::int AS n FROM demo_rebalance_log WHERE episode_id = ANY($1)`, [
        restartable,
      ]),
    ).toBe(restartable.length * 5);

    // Every node is still the process it was.
    for (const node of nodes) expect(node.process.exitCode).toBeNull();
    process.stdout.write(
      `database-outage: ${sent} events sent, ${accepted.size} accepted (202), ${episodesByEvent.size} monitor episodes; ` +
        `responses ${JSON.stringify(Object.fromEntries(statuses))}; back to healthy ${backToHealthyMs} ms after the database returned\n`,
    );
  }, 240_000);
});
