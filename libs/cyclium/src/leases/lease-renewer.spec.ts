import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { onCyclium } from '../telemetry/on-cyclium.js';
import type { CycliumEventMap } from '../telemetry/telemetry.events.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import { FakeClaims } from '../claims/fake-claims.js';
import { LeaseRenewer } from './lease-renewer.service.js';
import type { HeldClaim, WorkClaimsAdapter } from '../claims/work-claims-adapter.interface.js';

const LEASE_SECONDS = 3;
const START = 1_000_000;

function buildRenewer(adapter: WorkClaimsAdapter): LeaseRenewer {
  const options = resolveCycliumOptions({
    workClaims: adapter,
    workClaimsLeaseSeconds: LEASE_SECONDS,
    nodeIdentity: 'node-a',
  });
  const identity = new NodeIdentity(options);
  return new LeaseRenewer(adapter, options, identity, new CycliumTelemetry(identity));
}

const byKey = (claims: HeldClaim[]) => [...claims].sort((a, b) => a.key.localeCompare(b.key));

describe('LeaseRenewer', () => {
  let t: number;
  let fake: FakeClaims;
  let renewer: LeaseRenewer;

  beforeEach(() => {
    t = START;
    fake = new FakeClaims({ now: () => t });
    renewer = buildRenewer(fake);
  });

  afterEach(() => {
    jest.restoreAllMocks();
  });

  /** Acquires `key` as node-a in the fake and starts renewing it. */
  async function acquireAndTrack(
    key: string,
    leaseSeconds = LEASE_SECONDS,
    on: WorkClaimsAdapter = fake,
    by = renewer,
  ) {
    const sentAt = performance.now();
    const result = await on.acquire(key, 'node-a', { leaseSeconds });
    if (result.status !== 'acquired') throw new Error(`could not acquire ${key}: ${result.status}`);
    return by.track(key, result.claim.fence, sentAt);
  }

  /** Lets `key`'s lease lapse on the fake clock and has node-b take it over. */
  async function stealAsNodeB(key: string, on: WorkClaimsAdapter = fake) {
    const result = await on.acquire(key, 'node-b', { leaseSeconds: 60 });
    expect(result).toMatchObject({ status: 'acquired', stolenFrom: 'node-a' });
  }

  it('renews every tracked claim in ONE renewMany call per tick', async () => {
    const renewMany = jest.spyOn(fake, 'renewMany');
    const keys = Array.from({ length: 50 }, (_, i) => `job-${String(i).padStart(2, '0')}`);
    for (const key of keys) await acquireAndTrack(key);
    expect(renewer.held()).toHaveLength(50);

    t += 2_000; // inside the 3 s lease
    await renewer.tick();

    expect(renewMany).toHaveBeenCalledTimes(1);
    const [owner, sent, leaseSeconds] = renewMany.mock.calls[0];
    expect(owner).toBe('node-a');
    expect(leaseSeconds).toBe(LEASE_SECONDS);
    expect(byKey(sent)).toEqual(keys.map((key) => ({ key, fence: 1 })));
    // The leases really moved: each now ends LEASE_SECONDS after the tick's clock.
    for (const key of keys) expect(fake.inspect(key)?.leaseUntil).toBe(t + LEASE_SECONDS * 1000);
    expect(renewer.held()).toHaveLength(50);
  });

  it('does not call the adapter at all when nothing is held', async () => {
    const renewMany = jest.spyOn(fake, 'renewMany');
    await renewer.tick();
    expect(renewMany).not.toHaveBeenCalled();
  });

  it('moves each renewed hold’s local deadline to the tick’s send time + lease', async () => {
    const hold = await acquireAndTrack('k');
    const before = hold.localDeadline;
    const tickStart = performance.now();
    await renewer.tick();
    expect(hold.localDeadline).toBeGreaterThanOrEqual(tickStart + LEASE_SECONDS * 1000);
    expect(hold.localDeadline).toBeGreaterThanOrEqual(before);
    expect(hold.lost).toBe(false);
  });

  it(
    'marks a claim another node took over as lost (not_owner) and stops renewing it; the others ' +
      'stay held',
    async () => {
      const kept = await Promise.all(['a', 'b', 'c'].map((key) => acquireAndTrack(key, 60)));
      const stolen = await acquireAndTrack('stolen', 1);

      t += 1_001; // only 'stolen' (1 s lease) lapses
      await stealAsNodeB('stolen');

      const renewMany = jest.spyOn(fake, 'renewMany');
      await renewer.tick();

      expect(renewMany).toHaveBeenCalledTimes(1);
      expect(stolen.signal.aborted).toBe(true);
      expect(stolen.signal.reason).toBeInstanceOf(ClaimLostError);
      expect(stolen.signal.reason).toMatchObject({ key: 'stolen', fence: 1, reason: 'not_owner' });
      expect(() => stolen.check()).toThrow(ClaimLostError);
      for (const hold of kept) {
        expect(hold.signal.aborted).toBe(false);
        expect(hold.lost).toBe(false);
      }
      expect(byKey(renewer.held())).toEqual([
        { key: 'a', fence: 1 },
        { key: 'b', fence: 1 },
        { key: 'c', fence: 1 },
      ]);
      // The renewer did not disturb the new owner.
      expect(fake.inspect('stolen')).toMatchObject({ owner: 'node-b', fence: 2, state: 'claimed' });

      // The lost claim is not sent again on the next tick.
      await renewer.tick();
      expect(renewMany).toHaveBeenCalledTimes(2);
      expect(byKey(renewMany.mock.calls[1][1]).map((c) => c.key)).toEqual(['a', 'b', 'c']);
    },
  );

  it(
    'survives a failed renewal (database unreachable) without throwing and without marking ' +
      'holds lost',
    async () => {
      const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
      const failed: unknown[] = [];
      const unsubscribe = onCyclium('work_claims.renew_failed', (event) => failed.push(event));
      try {
        const holds = [await acquireAndTrack('a'), await acquireAndTrack('b')];
        const renewMany = jest
          .spyOn(fake, 'renewMany')
          .mockRejectedValueOnce(new Error('connect ECONNREFUSED 127.0.0.1:5432'))
          .mockRejectedValueOnce(new Error('connect ECONNREFUSED 127.0.0.1:5432'));

        await expect(renewer.tick()).resolves.toBeUndefined();
        await expect(renewer.tick()).resolves.toBeUndefined();

        expect(renewMany).toHaveBeenCalledTimes(2);
        for (const hold of holds) {
          expect(hold.signal.aborted).toBe(false);
          expect(hold.lost).toBe(false);
        }
        expect(byKey(renewer.held())).toEqual([
          { key: 'a', fence: 1 },
          { key: 'b', fence: 1 },
        ]);
        expect(failed).toEqual([]);
        // Logged once per outage, not once per tick.
        expect(warn).toHaveBeenCalledTimes(1);
        expect(warn).toHaveBeenCalledWith(
          expect.stringContaining('claim renewal failed: connect ECONNREFUSED'),
        );

        // Once the database answers again, the next tick renews both.
        t += 2_000;
        await renewer.tick();
        expect(renewMany).toHaveBeenCalledTimes(3);
        expect(fake.inspect('a')?.leaseUntil).toBe(t + LEASE_SECONDS * 1000);
        expect(fake.inspect('b')?.leaseUntil).toBe(t + LEASE_SECONDS * 1000);
        expect(holds.every((hold) => !hold.lost)).toBe(true);
      } finally {
        unsubscribe();
      }
    },
  );

  it('does not send a released hold in the next tick', async () => {
    const a = await acquireAndTrack('a');
    const b = await acquireAndTrack('b');
    await acquireAndTrack('c');
    b.release();
    expect(byKey(renewer.held()).map((c) => c.key)).toEqual(['a', 'c']);

    const renewMany = jest.spyOn(fake, 'renewMany');
    t += 2_000;
    await renewer.tick();

    expect(renewMany).toHaveBeenCalledTimes(1);
    expect(byKey(renewMany.mock.calls[0][1])).toEqual([
      { key: 'a', fence: 1 },
      { key: 'c', fence: 1 },
    ]);
    expect(fake.inspect('b')?.leaseUntil).toBe(START + LEASE_SECONDS * 1000);
    expect(b.lost).toBe(true);
    expect(a.lost).toBe(false);
  });

  it('does not track a passthrough hold (fence null)', async () => {
    const renewMany = jest.spyOn(fake, 'renewMany');
    const hold = renewer.track('pass', null, performance.now());
    expect(renewer.held()).toEqual([]);
    await renewer.tick();
    expect(renewMany).not.toHaveBeenCalled();
    expect(hold.lost).toBe(false);
  });

  it('runs one tick at a time: a tick requested while one is running joins it', async () => {
    await acquireAndTrack('a');
    const renewMany = jest.spyOn(fake, 'renewMany');
    const first = renewer.tick();
    const second = renewer.tick();
    expect(second).toBe(first);
    await Promise.all([first, second]);
    expect(renewMany).toHaveBeenCalledTimes(1);

    await renewer.tick();
    expect(renewMany).toHaveBeenCalledTimes(2);
  });

  it('falls back to one renew per claim when the adapter has no renewMany', async () => {
    const plain: WorkClaimsAdapter = {
      acquire: (key, owner, options) => fake.acquire(key, owner, options),
      renew: (key, owner, leaseSeconds, fence) => fake.renew(key, owner, leaseSeconds, fence),
      complete: (key, owner, fence) => fake.complete(key, owner, fence),
      fail: (key, owner, detail, fence) => fake.fail(key, owner, detail, fence),
      owns: (key, owner, fence) => fake.owns(key, owner, fence),
      reclaimExpired: (limit) => fake.reclaimExpired(limit),
    };
    expect('renewMany' in plain).toBe(false);
    const plainRenewer = buildRenewer(plain);
    const renew = jest.spyOn(plain, 'renew');
    const fakeRenewMany = jest.spyOn(fake, 'renewMany');

    const kept = [
      await acquireAndTrack('a', 60, plain, plainRenewer),
      await acquireAndTrack('b', 60, plain, plainRenewer),
    ];
    const stolen = await acquireAndTrack('stolen', 1, plain, plainRenewer);
    t += 1_001;
    await stealAsNodeB('stolen', plain);

    await plainRenewer.tick();

    expect(fakeRenewMany).not.toHaveBeenCalled();
    expect(renew).toHaveBeenCalledTimes(3);
    expect(renew).toHaveBeenCalledWith('a', 'node-a', LEASE_SECONDS, 1);
    expect(renew).toHaveBeenCalledWith('b', 'node-a', LEASE_SECONDS, 1);
    expect(renew).toHaveBeenCalledWith('stolen', 'node-a', LEASE_SECONDS, 1);
    expect(fake.inspect('a')?.leaseUntil).toBe(t + LEASE_SECONDS * 1000);
    expect(stolen.signal.reason).toMatchObject({ reason: 'not_owner', key: 'stolen' });
    expect(kept.every((hold) => !hold.lost)).toBe(true);
    expect(byKey(plainRenewer.held()).map((c) => c.key)).toEqual(['a', 'b']);
  });

  it(
    'emits work_claims.renewed and work_claims.renew_failed with dedupeKey, fence and ' +
      'ownerNode',
    async () => {
      const renewed: CycliumEventMap['work_claims.renewed'][] = [];
      const failed: CycliumEventMap['work_claims.renew_failed'][] = [];
      const unsubscribeRenewed = onCyclium('work_claims.renewed', (event) => renewed.push(event));
      const unsubscribeFailed = onCyclium('work_claims.renew_failed', (event) =>
        failed.push(event),
      );
      try {
        await acquireAndTrack('kept', 60);
        await acquireAndTrack('stolen', 1);
        t += 1_001;
        await stealAsNodeB('stolen');

        await renewer.tick();

        expect(renewed).toEqual([
          {
            dedupeKey: 'kept',
            fence: 1,
            ownerNode: 'node-a',
            durationMs: expect.any(Number),
            lagMs: expect.any(Number),
          },
        ]);
        expect(failed).toEqual([
          { dedupeKey: 'stolen', fence: 1, ownerNode: 'node-a', durationMs: expect.any(Number) },
        ]);
        expect(renewed[0].durationMs).toBeGreaterThanOrEqual(0);
      } finally {
        unsubscribeRenewed();
        unsubscribeFailed();
      }
    },
  );

  it(
    'says how late a renewal was sent against its schedule, a third of the lease after the ' +
      'acquire',
    async () => {
      const renewed: CycliumEventMap['work_claims.renewed'][] = [];
      const unsubscribe = onCyclium('work_claims.renewed', (event) => renewed.push(event));
      try {
        const result = await fake.acquire('late', 'node-a', { leaseSeconds: 60 });
        if (result.status !== 'acquired') throw new Error('could not acquire late');
        // Acquired two seconds ago on the local clock: its renewal was due after a third of the
        // lease (1 s), so it is 1 s late.
        renewer.track('late', result.claim.fence, performance.now() - 2_000);
        await renewer.tick();
        expect(renewed.map((e) => e.lagMs)).toEqual([expect.closeTo(1_000, -2)]);
        // Renewed just now: the next tick, at once, is early, which counts as no lag.
        await renewer.tick();
        expect(renewed[1]?.lagMs).toBe(0);
      } finally {
        unsubscribe();
      }
    },
  );
});
