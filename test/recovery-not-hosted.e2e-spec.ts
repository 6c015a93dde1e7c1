import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { Actor, Expectation, Recovery, type EpisodeContext } from '@cyclium/nestjs';
import type pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const STALE_MS = 1_000;
const INTERVAL_MS = 500;
const GRACE_MS = 4_000;
/** What one sweep and a timer firing late on a loaded machine may add to the sweep interval. */
const SWEEP_ALLOWANCE_MS = 750;

@Injectable()
@Actor({ id: 'kept' })
class KeptActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart' })
  async job(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('rerun', () => ep.trigger.payload.tag);
  }
}

/**
 * A node that crashed while it ran 600 episodes of an actor the next release removed (`retired`,
 * `restart` policy, its definition recorded) and one of an actor that is still hosted (`kept`).
 * The 600 rows are the shape real ones have: running, owned by the dead node, one journal entry.
 */
async function crash(
  db: pg.Pool,
  env: string | null,
  ago: { died: string; retired: string; orphan: string },
): Promise<{ orphanId: string; diedAt: Date }> {
  const client = await db.connect();
  // A broken connection also rejects the query under way, which fails the test; the event must not end the worker.
  const onError = () => undefined;
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ died_at: Date }>(
      `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, actors, started_at, last_seen_at)
       VALUES ('node-dead-' || coalesce($1, 'default'), NULL, $1, 'full', 'gone', 1, '0.0.0', ARRAY['kept', 'retired'], now() - interval '1 hour', now() - $2::interval)
       RETURNING last_seen_at AS died_at`,
      [env, ago.died],
    );
    const retired = await client.query<{ id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, source_env,
                                     started_at, inserted_at, updated_at)
       SELECT 'retired', 'job', 'manual', jsonb_build_object('type', 'manual', 'payload', jsonb_build_object('n', g)), 'running',
              'node-dead-' || coalesce($1, 'default'), $1, now() - $2::interval, now() - $2::interval, now() - $2::interval
         FROM generate_series(1, 600) g
       RETURNING id`,
      [env, ago.retired],
    );
    const orphan = await client.query<{ id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, source_env,
                                     started_at, inserted_at, updated_at)
       VALUES ('kept', 'job', 'manual', '{"type": "manual", "payload": {"tag": "orphan"}}', 'running',
               'node-dead-' || coalesce($1, 'default'), $1, now() - $2::interval, now() - $2::interval, now() - $2::interval)
       RETURNING id`,
      [env, ago.orphan],
    );
    const ids = [...retired.rows.map((r) => r.id), orphan.rows[0]!.id];
    await client.query(
      `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref, duration_ms, created_at)
       SELECT e.id, 1, 'step', 'fetch', '{"v": 1}', 12, e.started_at FROM cyclium_episodes e WHERE e.id = ANY($1::uuid[])`,
      [ids],
    );
    await client.query('COMMIT');
    return { orphanId: orphan.rows[0]!.id, diedAt: rows[0]!.died_at };
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.off('error', onError);
    client.release();
  }
}

describe('recovery reads oldest-stale first and ends the episodes of an actor no node hosts', () => {
  const database = useDatabase();
  const warnings: string[] = [];
  let app: INestApplicationContext;

  beforeAll(async () => {
    await database.db.query(
      `INSERT INTO cyclium_actor_definitions (actor_id, expectations) VALUES ('retired', '[{"id": "job", "recovery_policy": "restart", "max_attempts": 3}]')`,
    );
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'node-live',
        nodeBeatIntervalMs: 1_000,
        recovery: {
          settleMs: 0,
          intervalMs: INTERVAL_MS,
          staleAfterMs: STALE_MS,
          notHostedGraceMs: GRACE_MS,
        },
      },
      providers: [KeptActor],
    });
    const capture: LoggerService = {
      log() {},
      error() {},
      warn: (message: unknown) => void warnings.push(String(message)),
    };
    app.useLogger(capture);
  });

  afterAll(async () => {
    await app?.close();
  });

  const one = async <T extends pg.QueryResultRow>(sql: string, params: unknown[]) =>
    (await database.db.query<T>(sql, params)).rows[0] as T;

  it('takes a fresh orphan within one sweep interval of going stale, past 600 stale rows it cannot run; fails those 600 after the grace period', async () => {
    // The live node has watched for longer than the grace before the crash, so only the dead node's
    // declaration (a release from before boot ids and expectation lists: both NULL) holds the 600.
    await waitFor(
      'node-live to have watched for the grace period',
      async () =>
        (
          await one<{ ok: boolean }>(
            `SELECT started_at < now() - make_interval(secs => $1::double precision / 1000) AS ok
           FROM cyclium_nodes WHERE node_identity = 'node-live'`,
            [GRACE_MS + INTERVAL_MS],
          )
        ).ok,
      GRACE_MS + 10_000,
    );
    const { orphanId, diedAt } = await crash(database.db, null, {
      died: '0 seconds',
      retired: '10 minutes',
      orphan: '0 seconds',
    });

    // The orphan's journal went quiet when its node died; it is stale STALE_MS later (database clock).
    const taken = await waitFor(
      'the orphan to be taken by a sweep',
      () =>
        one<{ at: Date }>(
          `SELECT created_at AS at FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'resumed'`,
          [orphanId],
        ),
      10_000,
    );
    const lateMs = taken.at.getTime() - (diedAt.getTime() + STALE_MS);
    expect(lateMs).toBeLessThanOrEqual(INTERVAL_MS + SWEEP_ALLOWANCE_MS);
    // Taken while the 600 still filled the table: the dead node declared `retired` until it died.
    expect(taken.at.getTime()).toBeLessThan(diedAt.getTime() + GRACE_MS);
    await waitFor(
      'the orphan to finish',
      async () =>
        (
          await one<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [
            orphanId,
          ])
        ).status === 'done',
    );

    const notHosted = () =>
      one<{ n: number; first: Date; last: Date }>(
        `SELECT count(*)::int AS n, min(finished_at) AS first, max(finished_at) AS last FROM cyclium_episodes
          WHERE actor_id = 'retired' AND source_env IS NULL AND status = 'failed' AND error_class = 'not_hosted'`,
        [],
      );
    await waitFor(
      'the 600 to end not_hosted',
      async () => (await notHosted()).n === 600,
      GRACE_MS + 10_000,
    );
    const ended = await notHosted();
    // Not before the grace period after the last node that declared `retired` was seen, and within a sweep after it.
    expect(ended.first.getTime()).toBeGreaterThanOrEqual(diedAt.getTime() + GRACE_MS);
    expect(ended.last.getTime()).toBeLessThanOrEqual(
      diedAt.getTime() + GRACE_MS + INTERVAL_MS + SWEEP_ALLOWANCE_MS,
    );

    const traces = await one<{ markers: number; events: number; detail: string }>(
      `SELECT (SELECT count(*)::int FROM cyclium_episode_steps s JOIN cyclium_episodes e ON e.id = s.episode_id
                WHERE e.actor_id = 'retired' AND s.name = 'not_hosted') AS markers,
              (SELECT count(*)::int FROM cyclium_events
                WHERE type = 'episode.failed' AND payload->>'errorClass' = 'not_hosted' AND payload->>'actorId' = 'retired') AS events,
              (SELECT error_detail FROM cyclium_episodes WHERE actor_id = 'retired' LIMIT 1) AS detail`,
      [],
    );
    expect(traces).toMatchObject({ markers: 600, events: 600 });
    expect(traces.detail).toMatch(/actor retired .*last owned by node-dead-default/);
    expect(
      warnings.filter((w) => /600 episode\(s\) of actor retired as not_hosted/.test(w)),
    ).toHaveLength(1);
    // One line per episode for the first 20 of the actor, then their count: a warning each, not a flood.
    expect(
      warnings.filter((w) => /episode \S+ \(retired\.\w+\) failed as not_hosted/.test(w)),
    ).toHaveLength(20);
  });

  it('pages past 600 rows a resolvePolicy keeps in the candidates to reach the orphan behind them, in one sweep', async () => {
    const { orphanId } = await crash(database.db, 'paging', {
      died: '10 minutes',
      retired: '10 minutes',
      orphan: '1 minute',
    });
    // Swept by hand: `kept` runs here, `retired` nowhere (its last node died 10 minutes ago).
    const result = await app
      .get(Recovery)
      .sweep({ sourceEnv: 'paging', resolvePolicy: () => 'restart' });
    expect(result).toMatchObject({
      restarted: 1,
      skipped: 600,
      skippedFor: { not_hosted: 600 },
      notHosted: 600,
    });
    expect(
      await one(`SELECT attempts, owner_node FROM cyclium_episodes WHERE id = $1`, [orphanId]),
    ).toEqual({ attempts: 1, owner_node: 'node-live' });
  });
});
