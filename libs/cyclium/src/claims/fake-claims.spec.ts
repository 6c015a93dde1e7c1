import { beforeEach, describe, expect, it } from '@jest/globals';
import { FakeClaims } from './fake-claims.js';
import type { AcquireResult } from './work-claims-adapter.interface.js';

const LEASE = 10; // seconds
const START = 1_000_000;

describe('FakeClaims', () => {
  let t: number;
  let claims: FakeClaims;

  beforeEach(() => {
    t = START;
    claims = new FakeClaims({ now: () => t });
  });

  const acquire = (
    key: string,
    owner: string,
    leaseSeconds = LEASE,
    workType?: string,
  ): Promise<AcquireResult> => claims.acquire(key, owner, { leaseSeconds, workType });

  it(
    'grants a first acquire fence 1, attempt 1, leased until now + leaseSeconds on the injected ' +
      'clock',
    async () => {
      expect(await acquire('k', 'A')).toEqual({
        status: 'acquired',
        claim: { fence: 1, attempt: 1, leaseUntil: new Date(START + LEASE * 1000) },
      });
      expect(claims.inspect('k')).toEqual({
        state: 'claimed',
        owner: 'A',
        leaseUntil: START + LEASE * 1000,
        attempt: 1,
        fence: 1,
        workType: null,
        errorDetail: null,
      });
    },
  );

  it(
    'answers busy to a second acquire of a held key, from another owner and from the holder ' +
      'itself (not re-entrant)',
    async () => {
      await acquire('k', 'A');
      const before = claims.inspect('k');
      expect(await acquire('k', 'B')).toEqual({ status: 'busy' });
      expect(await acquire('k', 'A')).toEqual({ status: 'busy' });
      expect(claims.inspect('k')).toEqual(before);
    },
  );

  it('re-grants a completed key with the next fence and the attempt reset to 1', async () => {
    await acquire('k', 'A');
    expect(await claims.complete('k', 'A', 1)).toBe('ok');
    expect(claims.inspect('k')?.state).toBe('done');

    const again = await acquire('k', 'B');
    expect(again).toEqual({
      status: 'acquired',
      claim: { fence: 2, attempt: 1, leaseUntil: new Date(START + LEASE * 1000) },
    });
    expect(again).not.toHaveProperty('stolenFrom');
    expect(claims.inspect('k')).toMatchObject({
      state: 'claimed',
      owner: 'B',
      fence: 2,
      attempt: 1,
    });
  });

  it(
    'keeps a lease through its last millisecond and lets it be stolen once it has ' + 'lapsed',
    async () => {
      await acquire('k', 'A');

      t = START + LEASE * 1000; // the lease's last instant: still live
      expect(await acquire('k', 'B')).toEqual({ status: 'busy' });

      t = START + LEASE * 1000 + 1;
      expect(await acquire('k', 'B')).toEqual({
        status: 'acquired',
        claim: { fence: 2, attempt: 2, leaseUntil: new Date(t + LEASE * 1000) },
        stolenFrom: 'A',
      });
      expect(claims.inspect('k')).toMatchObject({
        state: 'claimed',
        owner: 'B',
        fence: 2,
        attempt: 2,
      });
    },
  );

  it(
    'A → B → A: the first fence no longer owns the key and cannot complete it; the new fence ' +
      'can',
    async () => {
      await acquire('k', 'A');
      t += LEASE * 1000 + 1;
      expect(await acquire('k', 'B')).toMatchObject({
        status: 'acquired',
        claim: { fence: 2 },
        stolenFrom: 'A',
      });
      t += LEASE * 1000 + 1;
      expect(await acquire('k', 'A')).toMatchObject({
        status: 'acquired',
        claim: { fence: 3, attempt: 3 },
        stolenFrom: 'B',
      });

      expect(await claims.owns('k', 'A', 1)).toBe(false);
      expect(await claims.owns('k', 'B', 2)).toBe(false);
      expect(await claims.owns('k', 'A', 3)).toBe(true);

      expect(await claims.complete('k', 'A', 1)).toBe('not_owner');
      expect(await claims.renew('k', 'A', LEASE, 1)).toBe('not_owner');
      expect(claims.inspect('k')).toMatchObject({ state: 'claimed', owner: 'A', fence: 3 });

      expect(await claims.complete('k', 'A', 3)).toBe('ok');
      expect(claims.inspect('k')?.state).toBe('done');
    },
  );

  it('refuses renew, complete and fail from a non-owner and leaves the row untouched', async () => {
    await acquire('k', 'A');
    const before = claims.inspect('k');
    t += 1_000;

    expect(await claims.renew('k', 'B', LEASE)).toBe('not_owner');
    expect(await claims.renew('k', 'B', LEASE, 1)).toBe('not_owner');
    expect(await claims.complete('k', 'B')).toBe('not_owner');
    expect(await claims.complete('k', 'B', 1)).toBe('not_owner');
    expect(await claims.fail('k', 'B', 'nope')).toBe('not_owner');
    expect(await claims.fail('k', 'B', 'nope', 1)).toBe('not_owner');
    expect(claims.inspect('k')).toEqual(before);

    // and nobody owns a key that was never claimed
    expect(await claims.renew('missing', 'A', LEASE)).toBe('not_owner');
    expect(await claims.complete('missing', 'A')).toBe('not_owner');
    expect(await claims.fail('missing', 'A', 'x')).toBe('not_owner');
    expect(await claims.owns('missing', 'A', 1)).toBe(false);
    expect(claims.inspect('missing')).toBeUndefined();
  });

  it('renews the owner’s lease from the current clock', async () => {
    await acquire('k', 'A');
    t += 4_000;
    expect(await claims.renew('k', 'A', LEASE, 1)).toBe('ok');
    expect(claims.inspect('k')?.leaseUntil).toBe(t + LEASE * 1000);
  });

  it(
    'setBusy makes every acquire busy, even of a fresh key; clearBusy restores normal ' +
      'granting',
    async () => {
      claims.setBusy('k');
      expect(await acquire('k', 'A')).toEqual({ status: 'busy' });
      expect(await acquire('k', 'B')).toEqual({ status: 'busy' });
      expect(claims.inspect('k')).toBeUndefined();
      expect(await acquire('other', 'A')).toMatchObject({ status: 'acquired' });

      claims.clearBusy('k');
      expect(await acquire('k', 'A')).toMatchObject({
        status: 'acquired',
        claim: { fence: 1, attempt: 1 },
      });
    },
  );

  it(
    'renewMany returns only the claims the owner still holds at the given fence, and extends ' +
      'those',
    async () => {
      await acquire('held', 'A');
      await acquire('stolen', 'A', 1);
      await acquire('stale-fence', 'A');
      await acquire('done', 'A');
      await claims.complete('done', 'A', 1);
      await acquire('someone-else', 'B');

      t += 1_001; // 'stolen' lapses (1 s lease); the 10 s leases are still live
      await acquire('stolen', 'B');

      const kept = await claims.renewMany(
        'A',
        [
          { key: 'held', fence: 1 },
          { key: 'stolen', fence: 1 },
          { key: 'stale-fence', fence: 7 },
          { key: 'done', fence: 1 },
          { key: 'someone-else', fence: 1 },
          { key: 'missing', fence: 1 },
        ],
        LEASE,
      );

      expect(kept).toEqual([{ key: 'held', fence: 1 }]);
      expect(claims.inspect('held')?.leaseUntil).toBe(t + LEASE * 1000);
      expect(claims.inspect('stale-fence')?.leaseUntil).toBe(START + LEASE * 1000);
      expect(claims.inspect('stolen')).toMatchObject({ owner: 'B', fence: 2 });
    },
  );

  it(
    'reclaimExpired lists only lapsed claimed rows, oldest lease first, at most ' + '`limit`',
    async () => {
      // Acquired out of expiry order, so the result's order has to come from sorting.
      await acquire('mid', 'A', 7, 'type-mid');
      await acquire('new', 'B', 9);
      await acquire('old', 'C', 5, 'type-old');
      await acquire('live', 'A', 60);
      await acquire('done', 'A', 1);
      await claims.complete('done', 'A');
      await acquire('failed', 'A', 1);
      await claims.fail('failed', 'A', 'boom');

      t = START + 20_000;

      expect(await claims.reclaimExpired(10)).toEqual([
        {
          dedupeKey: 'old',
          ownerNode: 'C',
          fence: 1,
          leaseUntil: new Date(START + 5_000),
          workType: 'type-old',
        },
        {
          dedupeKey: 'mid',
          ownerNode: 'A',
          fence: 1,
          leaseUntil: new Date(START + 7_000),
          workType: 'type-mid',
        },
        {
          dedupeKey: 'new',
          ownerNode: 'B',
          fence: 1,
          leaseUntil: new Date(START + 9_000),
          workType: null,
        },
      ]);
      expect((await claims.reclaimExpired(2)).map((c) => c.dedupeKey)).toEqual(['old', 'mid']);
      expect(await claims.reclaimExpired(0)).toEqual([]);
    },
  );

  it('reclaimExpired lists nothing while every lease is live', async () => {
    await acquire('a', 'A');
    t += LEASE * 1000; // still within the lease
    expect(await claims.reclaimExpired(10)).toEqual([]);
  });

  it(
    'fail records state failed with the detail, and the next acquire counts the attempt ' + 'up',
    async () => {
      await acquire('k', 'A');
      expect(await claims.fail('k', 'A', 'boom', 1)).toBe('ok');
      expect(claims.inspect('k')).toMatchObject({
        state: 'failed',
        owner: 'A',
        errorDetail: 'boom',
        leaseUntil: t,
      });
      expect(await claims.owns('k', 'A', 1)).toBe(false);

      // A failed row is free at once: no lapse needed, and it is not a steal.
      const again = await acquire('k', 'B');
      expect(again).toEqual({
        status: 'acquired',
        claim: { fence: 2, attempt: 2, leaseUntil: new Date(t + LEASE * 1000) },
      });
      expect(claims.inspect('k')).toMatchObject({
        state: 'claimed',
        owner: 'B',
        errorDetail: null,
        attempt: 2,
      });
    },
  );

  it('keeps a row’s workType when a later acquire names none', async () => {
    await acquire('k', 'A', LEASE, 'report');
    await claims.complete('k', 'A');
    await acquire('k', 'B');
    expect(claims.inspect('k')?.workType).toBe('report');
  });

  it('inspect returns a copy that cannot change the stored row', async () => {
    await acquire('k', 'A');
    const row = claims.inspect('k') as { owner: string };
    row.owner = 'mallory';
    expect(claims.inspect('k')?.owner).toBe('A');
  });
});
