import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Expectation,
  onCyclium,
  type EpisodeContext,
  type SweepResult,
} from '@cyclium/nestjs';
import { insertOrphans } from '../bench/support/history-fixtures.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ORPHANS = 5_000;
/** The sweeps one node may need to take every orphan over (the restarts then wait for slots here, their claims held). */
const MAX_SWEEPS = 3;

/** Calls of each step's function, by episode: a restart that ran twice, or replayed a checkpointed step, shows here. */
const calls = new Map<string, number>();
const count = (key: string) => calls.set(key, (calls.get(key) ?? 0) + 1);

@Injectable()
@Actor({ id: 'burst', maxConcurrentEpisodes: 32 })
class BurstActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart' })
  async job(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('s1', () => {
      count(`${ep.episode.id}:s1`);
      return ep.trigger.payload.i;
    });
    await ep.step('s2', () => {
      count(`${ep.episode.id}:s2`);
      return ep.trigger.payload.i + 1;
    });
  }
}

/**
 * A node dies with 5,000 episodes running (step s1 journaled and checkpointed, s2 not yet): a
 * survivor takes all of them over within a fixed number of sweeps — not a page per interval — and
 * each runs once: s1 replays from its checkpoint, s2 runs exactly once.
 */
describe('a burst of 5,000 orphans', () => {
  const database = useDatabase();
  let node: INestApplicationContext | undefined;
  const sweeps: SweepResult[] = [];
  let off: (() => void) | undefined;

  beforeAll(async () => {
    const { db, url } = database;
    await insertOrphans(db, 'burst', 'job', ORPHANS);
    await db.query(
      `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref, created_at)
       SELECT id, 1, 'step', 's1', jsonb_build_object('v', (trigger_ref->'payload'->>'i')::int), now() - interval '9 minutes'
         FROM cyclium_episodes WHERE actor_id = 'burst'`,
    );
    await db.query(
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state)
       SELECT id, 1, 's1', jsonb_build_object('v', (trigger_ref->'payload'->>'i')::int) FROM cyclium_episodes WHERE actor_id = 'burst'`,
    );
    await db.query(`ANALYZE cyclium_episodes, cyclium_episode_steps`);
    off = onCyclium('recovery.sweep', (result) => sweeps.push(result));
    node = await startCycliumApp({
      url,
      poolSize: 10,
      cyclium: {
        nodeIdentity: 'survivor',
        workClaims: 'postgres',
        recovery: { settleMs: 0, intervalMs: 1_000, staleAfterMs: 5_000 },
      },
      providers: [BurstActor],
    });
  });

  afterAll(async () => {
    off?.();
    await node?.close();
  });

  it(`takes every orphan over within ${MAX_SWEEPS} sweeps, and each runs its remaining step once`, async () => {
    const { db } = database;
    await waitFor(
      'every orphan to end',
      async () =>
        (
          await db.query(
            `SELECT 1 FROM cyclium_episodes WHERE status IN ('running', 'queued') LIMIT 1`,
          )
        ).rowCount === 0,
      55_000,
      250,
    );
    let taken = 0;
    const needed = sweeps.findIndex((sweep) => (taken += sweep.restarted) >= ORPHANS) + 1;
    expect(needed).toBeGreaterThan(0);
    expect(needed).toBeLessThanOrEqual(MAX_SWEEPS);

    const { rows } = await db.query<{ status: string; attempts: number; n: string }>(
      `SELECT status, attempts, count(*) AS n FROM cyclium_episodes GROUP BY status, attempts`,
    );
    expect(rows).toEqual([{ status: 'done', attempts: 1, n: String(ORPHANS) }]);
    const journals = await db.query<{ steps: string; resumed: string; n: string }>(
      `SELECT steps, resumed, count(*) AS n FROM (
         SELECT string_agg(name, ',' ORDER BY step_no) FILTER (WHERE kind = 'step') AS steps,
                count(*) FILTER (WHERE name = 'resumed') AS resumed
           FROM cyclium_episode_steps GROUP BY episode_id) j
        GROUP BY steps, resumed`,
    );
    expect(journals.rows).toEqual([{ steps: 's1,s2', resumed: '1', n: String(ORPHANS) }]);
    expect([...calls.keys()].filter((key) => key.endsWith(':s1'))).toEqual([]);
    expect(calls.size).toBe(ORPHANS);
    expect([...calls.values()].every((n) => n === 1)).toBe(true);
  });
});
