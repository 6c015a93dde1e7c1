import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  Recovery,
  onCyclium,
  type EpisodeContext,
  type SweepResult,
} from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import type pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const runs: string[] = [];

@Injectable()
@Actor({ id: 'sweeper' })
class SweeperActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart', maxAttempts: 2 })
  async job(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    runs.push(`${ep.trigger.payload.tag}:${ep.resumed ? 'resumed' : 'fresh'}`);
    await ep.step('only', () => ep.trigger.payload.tag);
  }
}

describe('Recovery.sweep', () => {
  let url: string;
  let db: pg.Pool;
  let a: INestApplicationContext;
  let b: INestApplicationContext;
  const longAgo = new Date(Date.now() - 10 * 60_000);

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 2);
    const bus = new LocalBus();
    const node = (id: string) =>
      startCycliumApp({
        url,
        cyclium: {
          nodeIdentity: id,
          stackSlug: 'stack_a',
          workClaims: 'postgres',
          bus,
          recovery: { onBoot: false, staleAfterMs: 5_000 },
        },
        providers: [SweeperActor],
      });
    [a, b] = await Promise.all([node('node-a'), node('node-b')]);
  });

  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await db?.end();
  });

  const orphan = (tag: string, extra: Record<string, unknown> = {}) =>
    a.get(Episodes).create({
      actorId: 'sweeper',
      expectationId: 'job',
      payload: { tag },
      startedAt: longAgo,
      ownerNode: 'node-dead',
      ...extra,
    });
  const status = async (id: string) =>
    (await db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
  const settled = (id: string) =>
    waitFor(`episode ${id} to settle`, async () =>
      ['running', 'queued'].includes((await status(id)).status) ? undefined : status(id),
    );

  it('restarts a stale orphan once even when two nodes sweep at the same time, and reports the counts', async () => {
    const episode = await orphan('stale');
    const sweeps: SweepResult[] = [];
    const off = onCyclium('recovery.sweep', (event) => sweeps.push(event));
    const [ra, rb] = await Promise.all([a.get(Recovery).sweep(), b.get(Recovery).sweep()]);
    off();
    expect(ra.restarted + rb.restarted).toBe(1);
    expect(await settled(episode.id)).toMatchObject({ status: 'done', attempts: 1 });
    expect(runs.filter((r) => r.startsWith('stale:'))).toEqual(['stale:resumed']);
    expect(sweeps.map((s) => s.restarted).sort()).toEqual([0, 1]);
  });

  it('skips an episode whose claim has a live holder', async () => {
    const episode = await orphan('held');
    await db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until) VALUES ($1, 'claimed', 'node-alive', now() + interval '1 hour')`,
      [`episode:${episode.id}`],
    );
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 0, skipped: 1 });
    expect(await status(episode.id)).toMatchObject({ status: 'running', attempts: 0 });
    await db.query(`DELETE FROM cyclium_work_claims WHERE dedupe_key = $1`, [
      `episode:${episode.id}`,
    ]);
    await db.query(`UPDATE cyclium_episodes SET status = 'canceled' WHERE id = $1`, [episode.id]);
  });

  it('matches its own stack or no stack, and its own env strictly', async () => {
    const mine = await orphan('mine', { sourceStack: 'stack_a' });
    const legacy = await orphan('legacy', { sourceStack: null });
    const otherStack = await orphan('other-stack', { sourceStack: 'stack_b' });
    const otherEnv = await orphan('other-env', { sourceEnv: 'rc' });
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 2 });
    expect((await settled(mine.id)).status).toBe('done');
    expect((await settled(legacy.id)).status).toBe('done');
    expect(await status(otherStack.id)).toMatchObject({ status: 'running', attempts: 0 });
    expect(await status(otherEnv.id)).toMatchObject({ status: 'running', attempts: 0 });

    expect(await a.get(Recovery).sweep({ sourceEnv: 'rc' })).toMatchObject({ restarted: 1 });
    expect((await settled(otherEnv.id)).status).toBe('done');
    await db.query(`UPDATE cyclium_episodes SET status = 'canceled' WHERE id = $1`, [
      otherStack.id,
    ]);
  });

  it('runs concurrent sweeps on one node each with its own scope', async () => {
    const here = await orphan('scope-default');
    const there = await orphan('scope-rc', { sourceEnv: 'rc' });
    const [mine, theirs] = await Promise.all([
      a.get(Recovery).sweep(),
      a.get(Recovery).sweep({ sourceEnv: 'rc' }),
    ]);
    expect([mine.restarted, theirs.restarted]).toEqual([1, 1]);
    expect((await settled(here.id)).status).toBe('done');
    expect((await settled(there.id)).status).toBe('done');
  });

  it('fails as orphaned past maxAttempts, or when resolvePolicy says fail', async () => {
    const tired = await orphan('tired');
    await db.query(`UPDATE cyclium_episodes SET attempts = 2, max_attempts = 2 WHERE id = $1`, [
      tired.id,
    ]);
    expect(await a.get(Recovery).sweep()).toMatchObject({ failed: 1 });
    expect(await status(tired.id)).toMatchObject({
      status: 'failed',
      error_class: 'orphaned',
      attempts: 3,
    });

    const vetoed = await orphan('vetoed');
    expect(await a.get(Recovery).sweep({ resolvePolicy: () => 'fail' })).toMatchObject({
      failed: 1,
      restarted: 0,
    });
    expect(await status(vetoed.id)).toMatchObject({ status: 'failed', error_class: 'orphaned' });
    expect(runs.filter((r) => r.startsWith('tired:') || r.startsWith('vetoed:'))).toEqual([]);
  });

  it('adopts queued episodes whose node is gone, and leaves fresh running ones alone', async () => {
    const queued = await orphan('queued', {
      status: 'queued',
      ownerNode: 'node-gone',
      startedAt: null,
    });
    const fresh = await orphan('fresh', { startedAt: new Date() });
    expect(await b.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    expect(await settled(queued.id)).toMatchObject({ status: 'done', owner_node: 'node-b' });
    expect(await status(fresh.id)).toMatchObject({ status: 'running', attempts: 0 });
    await db.query(`UPDATE cyclium_episodes SET status = 'canceled' WHERE id = $1`, [fresh.id]);
  });
});
