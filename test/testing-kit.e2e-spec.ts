import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { createCycliumTestApp, type CycliumTestApp } from '@cyclium/nestjs/testing';
import { freshDatabase } from './support/database.js';

const HOUR = 3_600_000;
const WEEK = 7 * 24 * HOUR;

@Injectable()
@Actor({ id: 'clocked', maxConcurrentEpisodes: 16 })
class ClockedActor {
  @Expectation({ id: 'week', trigger: 'manual' })
  async week(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('before', () => 'before');
    await ep.sleep('week', WEEK);
    await ep.step('after', () => 'after');
    return { summary: 'a week later' };
  }

  @Expectation({
    id: 'flaky',
    trigger: 'manual',
    retry: { attempts: 3, backoff: { initialMs: 600_000, factor: 1 } },
  })
  async flaky(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('call', () => {
      if ((ep.episode.retries ?? 0) === 0) throw new Error('the API is down');
      return 'ok';
    });
    return {};
  }

  @Expectation({ id: 'later', trigger: 'manual' })
  async later(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('run', () => true);
    return {};
  }

  @Expectation({ id: 'hourly', trigger: { every: '1h' } })
  async hourly(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('tick', () => ep.trigger.scheduledAt);
    return {};
  }
}

/**
 * Issue 46, "Done when", third line: the testing kit runs a week-long sleep, a retry after a
 * 10-minute backoff, a run delayed by an hour and an hourly schedule, each to `done`, in under 5
 * seconds of wall time, with the actor's production code unchanged.
 */
describe('the testing kit: a test clock that makes sleeps, backoffs, delays and schedules due', () => {
  let kit: CycliumTestApp;

  beforeAll(async () => {
    kit = await createCycliumTestApp({
      databaseUrl: await freshDatabase(),
      providers: [ClockedActor],
    });
  }, 60_000);

  afterAll(async () => {
    await kit?.close();
  });

  const idOf = (result: object) => {
    if (!('episode' in result)) throw new Error(`no episode: ${JSON.stringify(result)}`);
    return (result.episode as { id: string }).id;
  };
  const hourly = async () =>
    (await kit.get(Episodes).list({ actorId: 'clocked', limit: 500 })).items.filter(
      (e) => e.expectationId === 'hourly',
    );

  it('runs each to done in under 5 s of wall time', async () => {
    const started = performance.now();
    const episodes = kit.get(Episodes);
    const week = idOf(await episodes.trigger('clocked', 'week', {}));
    const flaky = idOf(await episodes.trigger('clocked', 'flaky', {}));
    const later = idOf(await episodes.trigger('clocked', 'later', {}, { delayMs: HOUR }));
    await kit.runUntilIdle();
    // Nothing is due yet: asleep, in backoff, deferred.
    expect((await episodes.get(week))?.status).toBe('waiting');
    expect((await episodes.get(flaky))?.status).toBe('waiting');
    expect((await episodes.get(later))?.status).toBe('deferred');

    // Ten minutes: the backoff is over; the delayed run and the sleep are not due.
    await kit.clock.advance(600_000);
    await kit.runUntilIdle();
    expect((await kit.episodes.waitFor(flaky)).status).toBe('done');
    expect((await kit.episodes.journal(flaky)).filter((j) => j.kind === 'step')).toEqual([
      expect.objectContaining({ name: 'call', result: 'ok' }),
    ]);
    expect((await episodes.get(later))?.status).toBe('deferred');

    // The rest of the hour: the delayed run, and the schedule's next bucket.
    await kit.clock.advance(HOUR - 600_000);
    expect((await kit.episodes.waitFor(later)).status).toBe('done');
    await kit.runUntilIdle();
    expect((await hourly()).map((e) => e.status)).toEqual(['done']);
    expect((await episodes.get(week))?.status).toBe('waiting');

    // A week: the sleep ends, and the week's hourly buckets each ran once.
    await kit.clock.advance(WEEK);
    const slept = await kit.episodes.waitFor(week);
    expect(slept).toMatchObject({ status: 'done', summary: 'a week later' });
    const journal = (await kit.episodes.journal(week)).filter((j) => j.kind === 'step');
    expect(journal.map((j) => [j.name, j.kind])).toEqual([
      ['before', 'step'],
      ['sleep:week', 'step'],
      ['after', 'step'],
    ]);
    await kit.runUntilIdle();
    const ticks = await hourly();
    expect(ticks).toHaveLength(1 + 168);
    expect(ticks.every((e) => e.status === 'done')).toBe(true);
    // One per bucket: an hour apart, the first within the first hour.
    expect(new Set(ticks.map((e) => e.triggerRef.scheduledAt)).size).toBe(169);
    expect(performance.now() - started).toBeLessThan(5_000);
  }, 30_000);

  it('moves only forward', async () => {
    await expect(kit.clock.advance(-1)).rejects.toThrow(RangeError);
  });
});
