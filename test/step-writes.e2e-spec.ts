/**
 * Step writes that arrive together leave as one statement, and each row of it is still fenced on
 * its own claim: a stale holder in the batch writes nothing while the others commit, and a write
 * PostgreSQL refuses fails alone while the rest are written one by one.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { StepWrites } from '../libs/cyclium/src/episodes/step-writes.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { heldEpisodes } from './support/held-episodes.js';
import { useDatabase } from './support/database.js';

describe('batched step writes', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let writes: StepWrites;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'batcher', workClaims: 'postgres', bus: 'local' },
    });
    writes = app.get(StepWrites);
  });

  afterAll(async () => {
    await app?.close();
  });

  const held = async (n: number) =>
    (await heldEpisodes(app, 'batcher', n)).map((e) => ({
      id: e.episode.id,
      ownership: e.ownership,
    }));

  const record = (name: string) => ({
    stepNo: 1,
    journalNo: 1,
    name,
    resultJson: JSON.stringify({ v: { name } }),
    durationMs: 1,
  });
  const transactionsOf = async (ids: string[]) =>
    Number(
      (
        await database.db.query(
          `SELECT count(DISTINCT xmin::text) AS n FROM cyclium_episode_steps WHERE episode_id = ANY($1::uuid[])`,
          [ids],
        )
      ).rows[0].n,
    );

  it('writes a batch in one transaction, fencing each row on its own claim and reading back each cancel', async () => {
    const episodes = await held(5);
    const [stolen, canceled] = episodes as [(typeof episodes)[0], (typeof episodes)[0]];
    // Another node took the first claim over (fence + 1); a cancel was requested on the second.
    await database.db.query(
      `UPDATE cyclium_work_claims SET owner_node = 'thief', fence = fence + 1 WHERE dedupe_key = $1`,
      [stolen.ownership.key],
    );
    await database.db.query(
      `UPDATE cyclium_episodes SET cancel_requested_at = now() WHERE id = $1`,
      [canceled.id],
    );

    const outcomes = await Promise.all(
      episodes.map((e) => writes.write(e.id, e.ownership, record(`s-${e.id}`))),
    );

    expect(outcomes).toEqual(['not_owner', 'cancel_requested', 'written', 'written', 'written']);
    const { rows } = await database.db.query(
      `SELECT episode_id, (SELECT count(*)::int FROM cyclium_episode_checkpoints c WHERE c.episode_id = s.episode_id) AS checkpoints
         FROM cyclium_episode_steps s WHERE episode_id = ANY($1::uuid[])`,
      [episodes.map((e) => e.id)],
    );
    expect(new Set(rows.map((r: { episode_id: string }) => r.episode_id))).toEqual(
      new Set(episodes.slice(1).map((e) => e.id)),
    );
    expect(rows.every((r: { checkpoints: number }) => r.checkpoints === 1)).toBe(true);
    expect(await transactionsOf(episodes.map((e) => e.id))).toBe(1);
  });

  it('fails only the write PostgreSQL refuses, and writes the others one by one', async () => {
    const episodes = await held(4);
    const [taken] = episodes as [(typeof episodes)[0]];
    // Journal position 1 of the first episode is already taken: its write breaks the primary key.
    await database.db.query(
      `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name) VALUES ($1, 1, 'observation', 'earlier')`,
      [taken.id],
    );

    const outcomes = await Promise.allSettled(
      episodes.map((e) => writes.write(e.id, e.ownership, record(`s-${e.id}`))),
    );

    expect(outcomes[0]?.status).toBe('rejected');
    expect(outcomes.slice(1).map((o) => (o.status === 'fulfilled' ? o.value : o.reason))).toEqual([
      'written',
      'written',
      'written',
    ]);
    const others = episodes.slice(1).map((e) => e.id);
    expect(await transactionsOf(others)).toBe(3);
    const checkpoints = await database.db.query(
      `SELECT episode_id FROM cyclium_episode_checkpoints WHERE episode_id = ANY($1::uuid[])`,
      [episodes.map((e) => e.id)],
    );
    expect(new Set(checkpoints.rows.map((r: { episode_id: string }) => r.episode_id))).toEqual(
      new Set(others),
    );
  });
});
