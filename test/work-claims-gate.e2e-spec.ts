import { afterEach, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { ClaimLostError, WorkClaims, onCyclium, type CycliumEventName } from '@cyclium/nestjs';
import { getDataSourceToken } from '@nestjs/typeorm';
import type pg from 'pg';
import type { DataSource } from 'typeorm';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

describe('WorkClaims gate in a Nest app', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  const claimRows = async () =>
    (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_work_claims`)).rows[0]
      .n as number;
  const leaseUntil = async (key: string) =>
    (
      await database.db.query(`SELECT lease_until FROM cyclium_work_claims WHERE dedupe_key = $1`, [
        key,
      ])
    ).rows[0].lease_until as Date;

  it('with workClaims: false every call is a passthrough that touches no table', async () => {
    const app = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'node-p' } });
    apps.push(app);
    const claims = app.get(WorkClaims);
    expect(claims.enabled).toBe(false);
    const result = await claims.acquire('k1');
    expect(result).toEqual({ status: 'passthrough' });
    expect(await claims.acquire('k1')).toEqual({ status: 'passthrough' });
    expect(await claims.owns('k1', 'anyone', 99)).toBe(true);
    expect(await claims.complete('k1')).toBe('ok');
    const hold = claims.hold('k1', result);
    expect(hold.lost).toBe(false);
    expect(await claims.proveOwnership(database.db, 'k1', 'node-p', null)).toBe(true);
    expect(await claimRows()).toBe(0);
  });

  it("renews a held claim every lease / 3 and aborts the holder's signal when the claim is taken", async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'node-g', workClaims: 'postgres', workClaimsLeaseSeconds: 0.9 },
    });
    apps.push(app);
    const claims = app.get(WorkClaims);
    const result = await claims.acquire('renewed-key', 'node-g', { workType: 'episode' });
    expect(result).toMatchObject({ status: 'acquired', claim: { fence: 1 } });
    const hold = claims.hold('renewed-key', result);
    const first = await leaseUntil('renewed-key');
    await waitFor(
      'two renewals',
      async () => (await leaseUntil('renewed-key')).getTime() > first.getTime() + 500,
      5_000,
    );
    expect(hold.lost).toBe(false);

    // Another node takes it (as a steal would): the next renewal misses it and the holder hears.
    await database.db.query(
      `UPDATE cyclium_work_claims SET owner_node = 'node-h', fence = fence + 1 WHERE dedupe_key = 'renewed-key'`,
    );
    await waitFor('the holder to learn it lost the claim', () => hold.signal.aborted, 5_000);
    expect(hold.signal.reason).toBeInstanceOf(ClaimLostError);
    expect(hold.signal.reason).toMatchObject({ reason: 'not_owner', key: 'renewed-key', fence: 1 });
    expect(() => hold.check()).toThrow('no longer shows it held here');
  });

  it('keeps renewing while episode work holds every connection of the host pool', async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'node-s', workClaims: 'postgres', workClaimsLeaseSeconds: 0.9 },
    });
    apps.push(app);
    const claims = app.get(WorkClaims);
    const result = await claims.acquire('starved-key');
    const hold = claims.hold('starved-key', result);
    const hostPool = (
      app.get<DataSource>(getDataSourceToken()).driver as unknown as { master: pg.Pool }
    ).master;
    const busy = await Promise.all(
      Array.from({ length: hostPool.options.max ?? 3 }, () => hostPool.connect()),
    );
    try {
      expect(hostPool.idleCount).toBe(0);
      const before = await leaseUntil('starved-key');
      await waitFor(
        'a renewal despite the exhausted pool',
        async () => (await leaseUntil('starved-key')) > before,
        5_000,
      );
      expect(hold.lost).toBe(false);
    } finally {
      for (const client of busy) client.release();
    }
  });

  it('publishes acquired, busy, steal, renewed, completed and failed with key, fence, owner and duration', async () => {
    const events: Array<{ name: CycliumEventName; event: Record<string, unknown> }> = [];
    const names: CycliumEventName[] = [
      'work_claims.acquired',
      'work_claims.busy',
      'work_claims.steal',
      'work_claims.renewed',
      'work_claims.completed',
      'work_claims.failed',
    ];
    const unsubscribe = names.map((name) =>
      onCyclium(name, (event) => events.push({ name, event: { ...event } })),
    );
    try {
      const app = await startCycliumApp({
        url: database.url,
        cyclium: { nodeIdentity: 'node-t', workClaims: 'postgres', workClaimsLeaseSeconds: 0.6 },
      });
      apps.push(app);
      const claims = app.get(WorkClaims);
      const held = await claims.acquire('t1');
      claims.hold('t1', held);
      await claims.acquire('t1');
      await waitFor(
        'a renewal event',
        () => events.some((e) => e.name === 'work_claims.renewed'),
        5_000,
      );
      expect(await claims.complete('t1', 'node-t', 1)).toBe('ok');

      await claims.acquire('t2', 'node-t', { leaseSeconds: 0.1 });
      await waitFor(
        't2 to lapse',
        async () =>
          (
            await database.db.query(
              `SELECT lease_until < now() AS l FROM cyclium_work_claims WHERE dedupe_key = 't2'`,
            )
          ).rows[0].l,
      );
      await claims.acquire('t2');
      expect(await claims.fail('t2', 'node-t', 'crash', 2)).toBe('ok');
    } finally {
      unsubscribe.forEach((off) => off());
    }
    const seen = (name: CycliumEventName, key: string) =>
      events.find((e) => e.name === name && e.event.dedupeKey === key)?.event;
    expect(seen('work_claims.acquired', 't1')).toMatchObject({
      ownerNode: 'node-t',
      fence: 1,
      durationMs: expect.any(Number),
    });
    expect(seen('work_claims.busy', 't1')).toMatchObject({ ownerNode: 'node-t', fence: null });
    expect(seen('work_claims.renewed', 't1')).toMatchObject({ ownerNode: 'node-t', fence: 1 });
    expect(seen('work_claims.completed', 't1')).toMatchObject({ ownerNode: 'node-t', fence: 1 });
    expect(seen('work_claims.steal', 't2')).toMatchObject({ ownerNode: 'node-t', fence: 2 });
    expect(seen('work_claims.failed', 't2')).toMatchObject({ ownerNode: 'node-t', fence: 2 });
  });
});
