import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  CycliumStatus,
  Episodes,
  Expectation,
  type EpisodeContext,
  type HealthReport,
  type ReadinessCheck,
} from '@cyclium/nestjs';
import type pg from 'pg';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { TcpProxy, type ChunkVerdict, type ProxyConnection } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

const releases: Array<() => void> = [];
const releaseAll = () => releases.splice(0).forEach((release) => release());

@Injectable()
@Actor({ id: 'holder' })
class HolderActor {
  @Expectation({ id: 'hold', trigger: 'manual' })
  async hold(ep: EpisodeContext<Record<string, never>>): Promise<void> {
    await ep.step('first', () => 1);
    await new Promise<void>((resolve) => releases.push(resolve));
    await ep.step('second', () => 2);
  }
}

/** A short ping timeout: a ping that waited on the host pool would fail fast. */
const PROBE = { timeoutMs: 500, cacheMs: 0 };
/** Short echo intervals so the 30 s bound is checked in a few seconds. */
const ECHO = { busEchoIntervalMs: 400, busEchoTimeoutMs: 250 };

const failing = async (status: CycliumStatus): Promise<ReadinessCheck[]> =>
  (await status.readiness(PROBE)).failing;
const readyNow = async (status: CycliumStatus): Promise<HealthReport | false> => {
  const report = await status.readiness(PROBE);
  return report.ready && report;
};

const database = useDatabase();

/** Each verdict that misled: a fault the old indicator missed, or one it blamed on the node. */
describe('health: liveness and readiness tell the truth', () => {
  let closed = false;
  let app: INestApplicationContext;
  let status: CycliumStatus;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'health-node',
        workClaims: 'postgres',
        workClaimsLeaseSeconds: 6,
        busPollIntervalMs: 200,
        episodeShutdownMs: 1_000,
        ...ECHO,
      },
      providers: [HolderActor],
    });
    status = app.get(CycliumStatus);
    await waitFor('the node to be ready', () => readyNow(status));
  });

  afterAll(async () => {
    releaseAll();
    await database.db
      .query('ALTER TABLE IF EXISTS cyclium_events_away RENAME TO cyclium_events')
      .catch(() => undefined);
    await database.db
      .query('DROP TRIGGER IF EXISTS refuse_renewals ON cyclium_episodes')
      .catch(() => undefined);
    if (!closed) await app?.close();
  });

  it('a bus reader that keeps failing: not ready (bus_reader_failing), still live', async () => {
    await database.db.query('ALTER TABLE cyclium_events RENAME TO cyclium_events_away');
    try {
      await waitFor(
        'readiness to report the reader',
        async () => (await failing(status)).includes('bus_reader_failing'),
        10_000,
      );
      expect(status.snapshot().bus?.readFailing).toBe(true);
      expect(status.liveness().live).toBe(true);
    } finally {
      await database.db.query('ALTER TABLE cyclium_events_away RENAME TO cyclium_events');
    }
    await waitFor('readiness once the reader reads again', () => readyNow(status), 10_000);
  });

  it('renewals that fail: not ready (renewals_failing), still live', async () => {
    const started = await app.get(Episodes).trigger('holder', 'hold', {});
    expect(started.status).toBe('started');
    await waitFor('the episode to hold its claim', () => status.snapshot().liveClaims === 1);
    await database.db.query(`
      CREATE OR REPLACE FUNCTION refuse_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'renewal refused by the test'; END $$;
      CREATE TRIGGER refuse_renewals BEFORE UPDATE OF claim_lease_until ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION refuse_renewal()`);
    try {
      await waitFor(
        'readiness to report the renewals',
        async () => (await failing(status)).includes('renewals_failing'),
        10_000,
      );
      expect(status.liveness().live).toBe(true);
    } finally {
      await database.db.query('DROP TRIGGER refuse_renewals ON cyclium_episodes');
    }
    await waitFor('readiness once a renewal succeeds', () => readyNow(status), 10_000);
    releaseAll();
  });

  it('a host pool checked out to its last client: live, and ready (the ping and the echo do not queue behind the host)', async () => {
    const pool = app.get(CycliumDataSource).pool();
    const taken: pg.PoolClient[] = [];
    try {
      for (let i = 0; i < (pool.options.max ?? 5); i++) taken.push(await pool.connect());
      const saturatedAt = performance.now();
      const heardAt = () => performance.now() - (status.snapshot().bus?.heardAgoMs ?? Infinity);
      const report = await status.readiness(PROBE);
      expect(report.failing).toEqual([]);
      expect(status.liveness().live).toBe(true);
      // An echo round that completes while the pool stays saturated, and still no verdict against the node.
      await waitFor(
        'an echo heard with the host pool saturated',
        () => heardAt() > saturatedAt,
        5_000,
      );
      expect((await status.readiness(PROBE)).failing).toEqual([]);
    } finally {
      taken.forEach((client) => client.release());
    }
  });

  it('a drain: not ready from its start (draining), live throughout', async () => {
    const started = await app.get(Episodes).trigger('holder', 'hold', {});
    expect(started.status).toBe('started');
    await waitFor('the episode to hold its claim', () => status.snapshot().liveClaims === 1);
    closed = true;
    const closing = app.close();
    try {
      await waitFor(
        'readiness to report the drain',
        async () => (await failing(status)).includes('draining'),
        5_000,
        5,
      );
      expect(status.liveness().live).toBe(true);
    } finally {
      releaseAll();
      await closing;
    }
  });
});

/** The LISTEN connection goes through a proxy that can freeze, go deaf to notifications, or silence one connection. */
describe('health: a LISTEN connection that hears nothing is found out', () => {
  let proxy: TcpProxy;
  let app: INestApplicationContext;
  let status: CycliumStatus;
  let deaf = false;
  let listenConnection: number | undefined;
  let silenced: number | undefined;
  let echoesSent = 0;

  const isNotification = (chunk: Buffer) => chunk[0] === 0x41; // 'A': NotificationResponse
  beforeAll(async () => {
    proxy = await TcpProxy.start({
      target: database.url,
      onClientData: (chunk: Buffer, connection: ProxyConnection): ChunkVerdict => {
        if (chunk.includes('LISTEN "')) listenConnection = connection.id;
        else if (chunk.includes('pg_notify($1, $2)')) echoesSent++;
        return connection.id === silenced ? 'drop' : 'forward';
      },
      onServerData: (chunk: Buffer, connection: ProxyConnection): ChunkVerdict =>
        connection.id === silenced || (deaf && isNotification(chunk)) ? 'drop' : 'forward',
    });
    app = await startCycliumApp({
      url: proxy.url(database.url),
      cyclium: { nodeIdentity: 'echo-node', ...ECHO },
    });
    status = app.get(CycliumStatus);
    await waitFor('the node to be ready', () => readyNow(status));
  });

  afterAll(async () => {
    deaf = false;
    silenced = undefined;
    proxy?.thaw();
    await app?.close();
    await proxy?.close();
  });

  it('a proxy that stops forwarding: the bus is degraded and not ready well within 30 s, live; it recovers after thaw', async () => {
    const before = listenConnection;
    const frozenAt = performance.now();
    proxy.freeze();
    try {
      await waitFor(
        'the bus to be degraded',
        async () => (await failing(status)).includes('bus_degraded'),
        30_000,
      );
      expect(performance.now() - frozenAt).toBeLessThan(30_000);
      expect(status.snapshot().bus).toMatchObject({
        degraded: true,
        degradedReason: expect.stringContaining('no echo'),
      });
      expect(status.liveness().live).toBe(true);
      // The silent LISTEN connection is given up (its probe query never answers), not waited on for hours.
      await waitFor(
        'the LISTEN connection to be dropped',
        () => status.snapshot().bus?.listening === false,
        10_000,
      );
    } finally {
      proxy.thaw();
    }
    await waitFor('readiness after thaw', () => readyNow(status), 20_000);
    expect(status.snapshot().bus).toMatchObject({
      listening: true,
      degraded: false,
      degradedReason: null,
    });
    expect(listenConnection).not.toBe(before);
  });

  it('a half-open LISTEN connection (only it goes silent): degraded, replaced, ready again while the database answers throughout', async () => {
    const old = listenConnection;
    expect(old).toBeDefined();
    silenced = old;
    await waitFor(
      'the bus to be degraded',
      async () => (await status.readiness(PROBE)).failing.includes('bus_degraded'),
      30_000,
    );
    expect((await status.readiness(PROBE)).failing).not.toContain('database');
    await waitFor('a new LISTEN connection', () => listenConnection !== old, 10_000);
    await waitFor('readiness on the new connection', () => readyNow(status), 10_000);
    silenced = undefined;
  });

  it('a connection that answers but never hears (a pooler in transaction mode): degraded, and not replaced over and over', async () => {
    const connection = listenConnection;
    deaf = true;
    try {
      await waitFor(
        'the bus to be degraded',
        async () => (await failing(status)).includes('bus_degraded'),
        30_000,
      );
      // Several more echo rounds: the connection answers its probe, so it is kept (replacing it would not help).
      const sent = echoesSent;
      await waitFor('five more echo rounds', () => echoesSent >= sent + 5, 10_000);
      expect(listenConnection).toBe(connection);
      expect(status.snapshot().bus).toMatchObject({ listening: true, degraded: true });
    } finally {
      deaf = false;
    }
    await waitFor('readiness once notifications arrive again', () => readyNow(status), 10_000);
  });
});
