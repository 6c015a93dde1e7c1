import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { freshDatabase, pool } from './support/database.js';

const UNIQUE_VIOLATION = '23505';

describe('indexes that carry a guarantee', () => {
  let db: pg.Pool;

  beforeAll(async () => {
    db = pool(await freshDatabase());
  });

  afterAll(async () => {
    await db?.end();
  });

  const insertEpisode = (dedupeKey: string | null) =>
    db.query<{ id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, dedupe_key, status)
       VALUES ('resource_monitor', 'check_resource_limits', 'event', $1, 'running') RETURNING id`,
      [dedupeKey],
    );

  it('lets one live episode per dedupe key through, and another once the first is archived', async () => {
    const first = await insertEpisode('event:resource_monitor:check:abc');
    await expect(insertEpisode('event:resource_monitor:check:abc')).rejects.toMatchObject({
      code: UNIQUE_VIOLATION,
    });

    await db.query(`UPDATE cyclium_episodes SET archived_at = now() WHERE id = $1`, [
      first.rows[0].id,
    ]);
    const second = await insertEpisode('event:resource_monitor:check:abc');
    expect(second.rows[0].id).not.toEqual(first.rows[0].id);
    await expect(insertEpisode('event:resource_monitor:check:abc')).rejects.toMatchObject({
      code: UNIQUE_VIOLATION,
    });
  });

  it('does not constrain episodes without a dedupe key', async () => {
    await insertEpisode(null);
    await insertEpisode(null);
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE dedupe_key IS NULL`,
    );
    expect(rows[0].n).toBe(2);
  });

  const raise = (key: string, env: string | null) =>
    db.query(
      `INSERT INTO cyclium_findings (actor_id, finding_key, status, env) VALUES ('resource_monitor', $1, 'active', $2)`,
      [key, env],
    );

  it('treats two NULL envs as the same env: one active finding per key', async () => {
    await raise('limit_breach:db-1', null);
    await expect(raise('limit_breach:db-1', null)).rejects.toMatchObject({
      code: UNIQUE_VIOLATION,
    });
  });

  it('gives each env its own active finding per key, and ignores cleared ones', async () => {
    await raise('limit_breach:db-2', null);
    await raise('limit_breach:db-2', 'rc');
    await expect(raise('limit_breach:db-2', 'rc')).rejects.toMatchObject({
      code: UNIQUE_VIOLATION,
    });

    await db.query(
      `UPDATE cyclium_findings SET status = 'cleared' WHERE finding_key = 'limit_breach:db-2' AND env = 'rc'`,
    );
    await raise('limit_breach:db-2', 'rc');
  });

  it('keeps one row per output dedupe key and one claim per work key', async () => {
    const episode = await insertEpisode(null);
    const output = () =>
      db.query(
        `INSERT INTO cyclium_outputs (episode_id, type, dedupe_key) VALUES ($1, 'summary', 'out:1')`,
        [episode.rows[0].id],
      );
    await output();
    await expect(output()).rejects.toMatchObject({ code: UNIQUE_VIOLATION });

    const claim = () =>
      db.query(
        `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until) VALUES ('k', 'claimed', 'a', now())`,
      );
    await claim();
    await expect(claim()).rejects.toMatchObject({ code: UNIQUE_VIOLATION });
  });
});
