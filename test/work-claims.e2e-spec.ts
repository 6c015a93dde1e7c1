import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

describe('PostgresClaims against real PostgreSQL', () => {
  let url: string;
  let db: pg.Pool;
  let claims: PostgresClaims;
  let n = 0;
  const freshKey = () => `key-${++n}`;

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 4);
    claims = new PostgresClaims(db);
  });

  afterAll(async () => {
    await db?.end();
  });

  const row = async (key: string) =>
    (await db.query(`SELECT * FROM cyclium_work_claims WHERE dedupe_key = $1`, [key]))
      .rows[0] as Record<string, unknown>;

  /** Waits until the database clock has passed the key's lease. */
  const lapse = (key: string) =>
    waitFor(
      `the lease on ${key} to lapse`,
      async () =>
        (
          await db.query(
            `SELECT lease_until < now() AS lapsed FROM cyclium_work_claims WHERE dedupe_key = $1`,
            [key],
          )
        ).rows[0]?.lapsed,
    );

  it('two acquires on one key: one acquired, one busy; the holder asking again is busy too', async () => {
    const key = freshKey();
    const first = await claims.acquire(key, 'node-a', { leaseSeconds: 30, workType: 'episode' });
    expect(first).toMatchObject({ status: 'acquired', claim: { fence: 1, attempt: 1 } });
    expect(await claims.acquire(key, 'node-b', { leaseSeconds: 30 })).toEqual({ status: 'busy' });
    expect(await claims.acquire(key, 'node-a', { leaseSeconds: 30 })).toEqual({ status: 'busy' });
    expect(await row(key)).toMatchObject({
      state: 'claimed',
      owner_node: 'node-a',
      fence: '1',
      work_type: 'episode',
    });
  });

  it('re-acquires a key after complete, with the next fence and attempt reset to 1', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 30 });
    expect(await claims.complete(key, 'node-a')).toBe('ok');
    expect(await row(key)).toMatchObject({ state: 'done' });
    expect(await claims.acquire(key, 'node-b', { leaseSeconds: 30 })).toMatchObject({
      status: 'acquired',
      claim: { fence: 2, attempt: 1 },
    });
  });

  it('re-acquires a failed key counting the retry', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 30 });
    expect(await claims.fail(key, 'node-a', 'boom')).toBe('ok');
    expect(await row(key)).toMatchObject({ state: 'failed', error_detail: 'boom' });
    expect(await claims.acquire(key, 'node-a', { leaseSeconds: 30 })).toMatchObject({
      status: 'acquired',
      claim: { fence: 2, attempt: 2 },
    });
    expect(await row(key)).toMatchObject({ error_detail: null, finished_at: null });
  });

  it('steals a short lease once it lapses (by the database clock), with fence + 1', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 0.3 });
    expect(await claims.acquire(key, 'node-b', { leaseSeconds: 30 })).toEqual({ status: 'busy' });
    await lapse(key);
    expect(await claims.reclaimExpired(100)).toContainEqual(
      expect.objectContaining({ dedupeKey: key, ownerNode: 'node-a', fence: 1 }),
    );
    const stolen = await claims.acquire(key, 'node-b', { leaseSeconds: 30 });
    expect(stolen).toMatchObject({
      status: 'acquired',
      claim: { fence: 2, attempt: 2 },
      stolenFrom: 'node-a',
    });
    expect(await claims.reclaimExpired(100)).not.toContainEqual(
      expect.objectContaining({ dedupeKey: key }),
    );
    expect(await claims.owns(key, 'node-a', 1)).toBe(false);
    expect(await claims.owns(key, 'node-b', 2)).toBe(true);
  });

  it("A → B → A: A's first fence does not own, and cannot renew, complete or fail the new lease", async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 0.2 });
    await lapse(key);
    await claims.acquire(key, 'node-b', { leaseSeconds: 0.2 });
    await lapse(key);
    expect(await claims.acquire(key, 'node-a', { leaseSeconds: 30 })).toMatchObject({
      status: 'acquired',
      claim: { fence: 3 },
    });

    expect(await claims.owns(key, 'node-a', 1)).toBe(false);
    expect(await claims.owns(key, 'node-a', 3)).toBe(true);
    const before = await row(key);
    expect(await claims.renew(key, 'node-a', 60, 1)).toBe('not_owner');
    expect(await claims.complete(key, 'node-a', 1)).toBe('not_owner');
    expect(await claims.fail(key, 'node-a', 'stale', 1)).toBe('not_owner');
    expect(await row(key)).toEqual(before);
    expect(await claims.complete(key, 'node-a', 3)).toBe('ok');
  });

  it('renew, complete and fail by a non-owner answer not_owner and leave the row unchanged', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 30 });
    const before = await row(key);
    expect(await claims.renew(key, 'node-b', 60)).toBe('not_owner');
    expect(await claims.complete(key, 'node-b')).toBe('not_owner');
    expect(await claims.fail(key, 'node-b', 'nope')).toBe('not_owner');
    expect(await claims.owns(key, 'node-b', 1)).toBe(false);
    expect(await row(key)).toEqual(before);

    expect(await claims.renew(key, 'node-a', 60)).toBe('ok');
    expect((await row(key)).lease_until as Date).not.toEqual(before.lease_until);
  });

  it('does not renew a lapsed lease, even for its owner', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 0.2 });
    await lapse(key);
    expect(await claims.renew(key, 'node-a', 30)).toBe('not_owner');
    expect(await claims.owns(key, 'node-a', 1)).toBe(false);
  });

  it('renewMany renews every live claim of the owner in one statement and leaves out lost ones', async () => {
    const keys = Array.from({ length: 50 }, freshKey);
    // Leases long enough to outlast 50 acquires on a loaded machine (a 1 s one lapsed under CI),
    // and shorter than the renewal's 60 s, which the count below tells apart.
    for (const key of keys) await claims.acquire(key, 'node-r', { leaseSeconds: 30 });
    // One of them is taken away; another is held at a different fence than the renewer believes.
    await db.query(
      `UPDATE cyclium_work_claims SET owner_node = 'node-x', fence = fence + 1 WHERE dedupe_key = $1`,
      [keys[0]],
    );
    const held = keys.map((key, i) => ({ key, fence: i === 1 ? 7 : 1 }));
    const renewed = await claims.renewMany('node-r', held, 60);
    expect(renewed.map((c) => c.key).sort()).toEqual(keys.slice(2).sort());
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM cyclium_work_claims WHERE dedupe_key = ANY($1) AND lease_until > now() + interval '50 seconds'`,
      [keys],
    );
    expect(rows[0].n).toBe(48);
  });

  /** Separate connections (not a pool), all released at once, so the statements really race. */
  async function race<T>(
    count: number,
    attempt: (adapter: PostgresClaims, i: number) => Promise<T>,
  ): Promise<T[]> {
    const clients = Array.from({ length: count }, () => new pg.Client({ connectionString: url }));
    await Promise.all(clients.map((c) => c.connect()));
    try {
      const adapters = clients.map((c) => new PostgresClaims(c));
      return await Promise.all(adapters.map((adapter, i) => attempt(adapter, i)));
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  }

  it('16 concurrent first acquires from separate connections: exactly one winner, no exception', async () => {
    for (let round = 0; round < 10; round++) {
      const key = freshKey();
      const results = await race(16, (adapter, i) =>
        adapter.acquire(key, `node-${i}`, { leaseSeconds: 30 }),
      );
      const winners = results.filter((r) => r.status === 'acquired');
      expect(winners).toHaveLength(1);
      expect(results.filter((r) => r.status === 'busy')).toHaveLength(15);
      expect(winners[0]).toMatchObject({ claim: { fence: 1 } });
    }
  });

  it('16 concurrent steals of a lapsed lease from separate connections: exactly one winner, fence + 1', async () => {
    for (let round = 0; round < 10; round++) {
      const key = freshKey();
      await claims.acquire(key, 'node-dead', { leaseSeconds: 0.05 });
      await lapse(key);
      const results = await race(16, (adapter, i) =>
        adapter.acquire(key, `node-${i}`, { leaseSeconds: 30 }),
      );
      const winners = results.filter((r) => r.status === 'acquired');
      expect(winners).toHaveLength(1);
      expect(winners[0]).toMatchObject({ claim: { fence: 2 }, stolenFrom: 'node-dead' });
      const winner = results.indexOf(winners[0]);
      expect(await row(key)).toMatchObject({
        owner_node: `node-${winner}`,
        fence: '2',
        state: 'claimed',
      });
    }
  });

  it("a claim taken late in a transaction leases from the acquire, not from the transaction's start", async () => {
    const fresh = freshKey();
    const lapsed = freshKey();
    await claims.acquire(lapsed, 'node-b', { leaseSeconds: 0.1 });
    await lapse(lapsed);
    const client = await db.connect();
    try {
      await client.query('BEGIN');
      // The transaction has been open for a second when it takes the claims (its now() is that old).
      await client.query('SELECT pg_sleep(1)');
      expect(
        await claims.inTransaction.acquire(client, fresh, 'node-a', { leaseSeconds: 2 }),
      ).toMatchObject({ status: 'acquired' });
      expect(
        await claims.inTransaction.acquire(client, lapsed, 'node-a', { leaseSeconds: 2 }),
      ).toMatchObject({ status: 'acquired', stolenFrom: 'node-b' });
      const { rows } = await client.query(
        `SELECT extract(epoch FROM lease_until - clock_timestamp())::float8 AS left FROM cyclium_work_claims WHERE dedupe_key = ANY($1::text[])`,
        [[fresh, lapsed]],
      );
      // Leased from the transaction's start, at most 1 s would be left; from the acquire, 2 s less the
      // two statements since, which a loaded machine can stretch past the old 0.2 s allowance.
      expect(rows.map((r: { left: number }) => r.left > 1.5)).toEqual([true, true]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  });

  it('a fenced transaction holds the claim row until commit, so a thief waits and then wins cleanly', async () => {
    const key = freshKey();
    await claims.acquire(key, 'node-a', { leaseSeconds: 0.3 });
    const holder = await db.connect();
    try {
      await holder.query('BEGIN');
      expect(await claims.inTransaction.proveOwnership(holder, key, 'node-a', 1)).toBe(true);
      await lapse(key);
      let settled = false;
      const theft = claims
        .acquire(key, 'node-b', { leaseSeconds: 30 })
        .finally(() => (settled = true));
      // The thief blocks on the held row: prove it is waiting on a lock, not finished.
      await waitFor(
        'the thief to wait on the claim row',
        async () =>
          (
            await db.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
            )
          ).rows[0].n === 1,
      );
      expect(settled).toBe(false);
      await holder.query('COMMIT');
      expect(await theft).toMatchObject({
        status: 'acquired',
        claim: { fence: 2 },
        stolenFrom: 'node-a',
      });
    } finally {
      holder.release();
    }
    expect(await claims.inTransaction.proveOwnership(db, key, 'node-a', 1)).toBe(false);
  });

  it('renews many claims in key order, so it waits for a writer that holds claims in key order instead of deadlocking with it', async () => {
    const [low, high] = ['order-a', 'order-b'];
    // The higher key first: whether a plan walks the keys as given or the leases oldest first, an
    // unordered renewal would lock it first.
    for (const key of [high, low])
      expect((await claims.acquire(key, 'node-o', { leaseSeconds: 30 })).status).toBe('acquired');
    // A batched step write in the middle of its locking: the lower key is held, the higher one next.
    const writer = await db.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`SELECT 1 FROM cyclium_work_claims WHERE dedupe_key = $1 FOR SHARE`, [
        low,
      ]);
      // Asked in the other order on purpose: a renewal that locked as asked would take the higher key first.
      const renewed = claims.renewMany(
        'node-o',
        [
          { key: high, fence: 1 },
          { key: low, fence: 1 },
        ],
        30,
      );
      await waitFor(
        'the renewal to wait for the writer',
        async () =>
          (
            await db.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%last_heartbeat_at = now()%'`,
            )
          ).rows[0].n === 1,
      );
      // With the higher key taken by the renewal, this would be a deadlock (one of the two aborted).
      await writer.query(`SET LOCAL lock_timeout = '5s'`);
      await writer.query(`SELECT 1 FROM cyclium_work_claims WHERE dedupe_key = $1 FOR SHARE`, [
        high,
      ]);
      await writer.query('COMMIT');
      expect((await renewed).map((c) => c.key).sort()).toEqual([low, high]);
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      writer.release();
    }
  });
});
