import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const STALE_MS = 1_000;
const INTERVAL_MS = 500;
const GRACE_MS = 4_000;

@Injectable()
@Actor({ id: 'pinned' })
class PinnedV2 {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart', version: 'v2' })
  async job(ep: EpisodeContext): Promise<void> {
    await ep.step('rerun', () => 'v2');
  }
}

/**
 * A v1 episode orphaned by its node's crash, where the nodes left run v2 only: recovery leaves it
 * to a node of v1 while one beats (a v2 node restarting it would replay v1's journal on v2 code),
 * and the not_hosted grace counts from when the last node declaring v1 stopped beating.
 */
describe('versions: not_hosted counts from the last node of the version', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const boot = randomUUID();

  /** A node of v1 (another release) that beats now, or stopped beating `ago`. */
  const v1Node = (ago: string) =>
    database.db.query(
      `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, actors,
                                  boot_id, expectations, started_at, last_seen_at)
       VALUES ('node-v1', NULL, NULL, 'full', 'elsewhere', 1, '0.0.0', ARRAY['pinned'], $1::uuid,
               jsonb_build_object('boot', $1::text,
                                  'hosted', jsonb_build_object('pinned', jsonb_build_array('job',
                                                                                  'job@v1'))),
               now() - interval '1 hour', now() - $2::interval)
       ON CONFLICT (node_identity) DO UPDATE SET last_seen_at = EXCLUDED.last_seen_at`,
      [boot, ago],
    );

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'node-v2',
        nodeBeatIntervalMs: 1_000,
        recovery: {
          settleMs: 0,
          intervalMs: INTERVAL_MS,
          staleAfterMs: STALE_MS,
          notHostedGraceMs: GRACE_MS,
        },
      },
      providers: [PinnedV2],
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  const statusOf = async (id: string) =>
    (
      await database.db.query<{ status: string; error_class: string | null; owner_node: string }>(
        `SELECT status, error_class, owner_node FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0]!;

  it('leaves a v1 orphan alone while a v1 node beats, then fails it not_hosted after the grace', async () => {
    await v1Node('0 seconds');
    // Crashed on a v1 node a while ago: stale, its journal quiet.
    const { rows } = await database.db.query<{ id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status,
                                     owner_node, version, started_at, inserted_at, updated_at)
       VALUES ('pinned', 'job', 'manual', '{"type": "manual", "payload": {}}', 'running',
               'node-gone', 'v1', now() - interval '1 minute', now(), now() - interval '1 minute')
       RETURNING id`,
    );
    const id = rows[0]!.id;
    // While node-v1 beats, for longer than the grace and many sweeps (database clock): node-v2
    // neither restarts nor fails it.
    const beat = setInterval(() => void v1Node('0 seconds').catch(() => undefined), 250);
    try {
      await waitFor(
        'the grace and two sweeps to pass while node-v1 beats',
        async () =>
          (
            await database.db.query<{ past: boolean }>(
              `SELECT now() > inserted_at + make_interval(secs => $2::double precision / 1000) AS past
                 FROM cyclium_episodes WHERE id = $1`,
              [id, GRACE_MS + 2 * INTERVAL_MS],
            )
          ).rows[0]!.past,
        GRACE_MS + 10_000,
        100,
      );
    } finally {
      clearInterval(beat);
    }
    expect(await statusOf(id)).toMatchObject({ status: 'running', owner_node: 'node-gone' });
    const marks = await database.db.query(
      `SELECT name FROM cyclium_episode_steps WHERE episode_id = $1`,
      [id],
    );
    expect(marks.rows).toEqual([]);
    // node-v1 stops beating: the grace counts from its last beat.
    const { rows: stopped } = await database.db.query<{ at: Date }>(
      `SELECT last_seen_at AS at FROM cyclium_nodes WHERE node_identity = 'node-v1'`,
    );
    await waitFor(
      'the v1 orphan failed not_hosted',
      async () => (await statusOf(id)).status === 'failed',
      GRACE_MS + 10_000,
    );
    const failed = await database.db.query<{ error_class: string; finished_at: Date }>(
      `SELECT error_class, finished_at FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    expect(failed.rows[0]!.error_class).toBe('not_hosted');
    expect(failed.rows[0]!.finished_at.getTime()).toBeGreaterThanOrEqual(
      stopped[0]!.at.getTime() + GRACE_MS,
    );
  });
});
