import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import type pg from 'pg';
import { RetentionSchedule } from '../libs/cyclium/src/retention/retention.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ARCHIVE_AFTER_S = 60;
const DELETE_AFTER_S = 120;

let release: () => void = () => undefined;
let held = Promise.resolve();

@Injectable()
@Actor({ id: 'keeper', maxConcurrentEpisodes: 5 })
class KeeperActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ hold?: boolean }>): Promise<Convergence> {
    await ep.step('one', () => 1);
    if (ep.trigger.payload.hold) await held;
    await ep.step('two', () => 2);
    return { summary: 'kept' };
  }
}

/**
 * Retention against a real PostgreSQL: windows by the database clock (rows are aged by moving their
 * timestamps back, so a window of a minute is tested without waiting one), dedupe keys freed by
 * archiving and not before, deletion of an episode with what hangs off it, and the one-node lock.
 */
describe('retention', () => {
  let app: INestApplicationContext;
  let db: pg.Pool;
  let episodes: Episodes;
  let retention: RetentionSchedule;

  const status = async (id: string) =>
    (await db.query<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]))
      .rows[0]?.status;
  const runToEnd = async (key?: string, payload: { hold?: boolean } = {}) => {
    const result = await episodes.trigger('keeper', 'work', payload, key ? { dedupeKey: key } : {});
    expect(result.status).toBe('started');
    const id = (result as { episode: { id: string } }).episode.id;
    if (!payload.hold)
      await waitFor(`episode ${id} to end`, async () => (await status(id)) === 'done');
    return id;
  };
  const ageFinished = (ids: string[], seconds: number) =>
    db.query(
      `UPDATE cyclium_episodes SET finished_at = finished_at - make_interval(secs => $2) WHERE id = ANY($1::uuid[])`,
      [ids, seconds],
    );
  const ageArchived = (ids: string[], seconds: number) =>
    db.query(
      `UPDATE cyclium_episodes SET archived_at = archived_at - make_interval(secs => $2) WHERE id = ANY($1::uuid[])`,
      [ids, seconds],
    );
  const count = async (sql: string, params: unknown[]) =>
    Number((await db.query<{ n: string }>(sql, params)).rows[0]?.n);

  beforeAll(async () => {
    const url = await freshDatabase();
    db = pool(url);
    app = await startCycliumApp({
      url,
      cyclium: {
        workClaims: 'postgres',
        bus: 'local',
        busUndispatchedMaxAgeMs: 1_000,
        triggerRequestTtlMs: 1_000,
        retention: {
          archiveAfter: ARCHIVE_AFTER_S * 1000,
          deleteAfter: DELETE_AFTER_S * 1000,
          batchSize: 2,
          intervalMs: 3_600_000,
        },
      },
      providers: [KeeperActor],
    });
    episodes = app.get(Episodes);
    retention = app.get(RetentionSchedule);
  });

  afterAll(async () => {
    release();
    await app?.close();
    await db?.end();
  });

  it('keeps a dedupeKey a duplicate until its episode is archived, then starts a new episode under it', async () => {
    const first = await runToEnd('order-7');
    expect((await episodes.trigger('keeper', 'work', {}, { dedupeKey: 'order-7' })).status).toBe(
      'duplicate',
    );

    await ageFinished([first], ARCHIVE_AFTER_S - 2);
    await retention.passNow();
    expect((await episodes.trigger('keeper', 'work', {}, { dedupeKey: 'order-7' })).status).toBe(
      'duplicate',
    );
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_episodes WHERE id = $1 AND archived_at IS NULL`,
        [first],
      ),
    ).toBe(1);

    await ageFinished([first], 4);
    const pass = await retention.passNow();
    expect(pass).toMatchObject({ ran: true });
    expect(pass.archived).toBeGreaterThanOrEqual(1);
    const second = await runToEnd('order-7');
    expect(second).not.toBe(first);
    // The claim row of the first run was taken up again by the second (claims on), which ran both steps.
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_episode_steps WHERE episode_id = $1 AND kind = 'step'`,
        [second],
      ),
    ).toBe(2);
    expect((await episodes.trigger('keeper', 'work', {}, { dedupeKey: 'order-7' })).status).toBe(
      'duplicate',
    );
  });

  it('Episodes.archive frees a key at once, leaves a live episode alone, and says what it found', async () => {
    held = new Promise<void>((resolve) => (release = resolve));
    const live = await runToEnd('hold-1', { hold: true });
    await waitFor(
      'the held episode to run its first step',
      async () =>
        (await count(`SELECT count(*) AS n FROM cyclium_episode_steps WHERE episode_id = $1`, [
          live,
        ])) >= 1,
    );
    expect(await episodes.archive(live)).toBe('live');
    expect((await episodes.trigger('keeper', 'work', {}, { dedupeKey: 'hold-1' })).status).toBe(
      'duplicate',
    );
    release();
    await waitFor('the held episode to end', async () => (await status(live)) === 'done');

    expect(await episodes.archive(live)).toBe('archived');
    expect(await episodes.archive(live)).toBe('already_archived');
    expect(await episodes.archive('00000000-0000-4000-8000-000000000000')).toBe('not_found');
    expect(await episodes.archive('not-a-uuid')).toBe('not_found');
    const again = await runToEnd('hold-1');
    expect(again).not.toBe(live);
  });

  it('deletes archived work past deleteAfter with its journal, requests, outputs and claims, and keeps the rest', async () => {
    const [gone, young, waiting] = [await runToEnd(), await runToEnd(), await runToEnd()];
    const failed = await runToEnd();
    await db.query(`UPDATE cyclium_episodes SET status = 'failed' WHERE id = $1`, [failed]);
    await db.query(
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, state) VALUES ($1, 1, '{}')`,
      [failed],
    );
    await db.query(
      `INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node, status) VALUES ($1, 'keeper', 'work', 'n', 'completed')`,
      [gone],
    );
    await db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, finished_at)
                    SELECT 'trigger_request:' || id, 'done', 'n', now(), now() FROM cyclium_trigger_requests WHERE episode_id = $1`,
      [gone],
    );
    await db.query(
      `INSERT INTO cyclium_outputs (episode_id, type, dedupe_key, status) VALUES ($1, 't', 'out-gone', 'delivered'), ($2, 't', 'out-wait', 'pending')`,
      [gone, waiting],
    );
    await ageFinished([gone, young, waiting, failed], ARCHIVE_AFTER_S + 1);
    // batchSize 2: the pass loops while its batches come back full.
    expect((await retention.passNow()).archived).toBeGreaterThanOrEqual(4);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_episode_checkpoints WHERE episode_id = $1`, [
        failed,
      ]),
    ).toBe(0);

    await ageArchived([gone, waiting], DELETE_AFTER_S + 1);
    await ageArchived([young], DELETE_AFTER_S - 2);
    const pass = await retention.passNow();
    expect(pass.deleted).toBe(1);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_episodes WHERE id = ANY($1::uuid[])`, [
        [gone],
      ]),
    ).toBe(0);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_episode_steps WHERE episode_id = $1`, [gone]),
    ).toBe(0);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_trigger_requests WHERE episode_id = $1`, [
        gone,
      ]),
    ).toBe(0);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_outputs WHERE episode_id = $1`, [gone]),
    ).toBe(0);
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_work_claims WHERE dedupe_key = 'episode:' || $1 OR dedupe_key LIKE 'trigger_request:%'`,
        [gone],
      ),
    ).toBe(0);
    // Inside its window, or with an output still to deliver: kept, with its journal.
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_episodes WHERE id = ANY($1::uuid[])`, [
        [young, waiting],
      ]),
    ).toBe(2);
    expect(
      await count(`SELECT count(*) AS n FROM cyclium_episode_steps WHERE episode_id = $1`, [young]),
    ).toBeGreaterThan(0);
    await db.query(`UPDATE cyclium_outputs SET status = 'delivered' WHERE episode_id = $1`, [
      waiting,
    ]);
    expect((await retention.passNow()).deleted).toBe(1);
    expect(await status(waiting)).toBeUndefined();
  });

  it('deletes finished workflow instances past both windows, and archives no episode of a running one', async () => {
    const { rows } = await db.query<{ id: string; status: string }>(
      `INSERT INTO cyclium_workflow_instances (workflow_id, status, finished_at)
       VALUES ('w', 'done', now() - make_interval(secs => $1)), ('w', 'done', now() - make_interval(secs => $2)), ('w', 'running', NULL)
       RETURNING id, status`,
      [ARCHIVE_AFTER_S + DELETE_AFTER_S + 1, ARCHIVE_AFTER_S + DELETE_AFTER_S - 2],
    );
    const [old, recent, running] = rows.map((r) => r.id);
    const step = await runToEnd();
    await db.query(`UPDATE cyclium_episodes SET workflow_instance_id = $2 WHERE id = $1`, [
      step,
      running,
    ]);
    await ageFinished([step], ARCHIVE_AFTER_S + 1);
    expect((await retention.passNow()).instances).toBe(1);
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_workflow_instances WHERE id = ANY($1::uuid[])`,
        [[old]],
      ),
    ).toBe(0);
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_workflow_instances WHERE id = ANY($1::uuid[])`,
        [[recent, running]],
      ),
    ).toBe(2);
    expect(
      await count(
        `SELECT count(*) AS n FROM cyclium_episodes WHERE id = $1 AND archived_at IS NULL`,
        [step],
      ),
    ).toBe(1);
  });

  it('stands aside while another node of its stack and env holds the pass', async () => {
    const id = await runToEnd();
    await ageFinished([id], ARCHIVE_AFTER_S + 1);
    const other = await db.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT pg_advisory_xact_lock(1668183404, hashtext($1))`, [
        JSON.stringify([null, null]),
      ]);
      expect(await retention.passNow()).toMatchObject({ ran: false, archived: 0 });
      expect(
        await count(
          `SELECT count(*) AS n FROM cyclium_episodes WHERE id = $1 AND archived_at IS NULL`,
          [id],
        ),
      ).toBe(1);
      await other.query('COMMIT');
    } finally {
      other.release();
    }
    expect(await retention.passNow()).toMatchObject({ ran: true, archived: 1 });
  });
});
