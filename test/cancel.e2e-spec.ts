import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type Bus, type EpisodeContext } from '@cyclium/nestjs';
import { CYCLIUM_BUS_TRANSPORT } from '../libs/cyclium/src/cyclium.constants.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const steps: string[] = [];
let entered: (() => void) | undefined;
let release: (() => void) | undefined;
let enteredStepless: (() => void) | undefined;
let releaseStepless: (() => void) | undefined;

@Injectable()
@Actor({ id: 'cancellable' })
class CancellableActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext): Promise<void> {
    await ep.step('first', async () => {
      steps.push('first');
      entered?.();
      await new Promise<void>((resolve) => (release = resolve));
    });
    await ep.step('second', () => void steps.push('second'));
  }

  /** Sleeps far past the test: `waiting`, with its wake-up `scheduled`. */
  @Expectation({ id: 'sleeper', trigger: 'manual' })
  async sleeper(ep: EpisodeContext): Promise<void> {
    await ep.sleep('nap', 3_600_000);
  }

  /** Takes no step: nothing in its run reads the cancel flag back on the way. */
  @Expectation({ id: 'stepless', trigger: 'manual' })
  async stepless(): Promise<{ summary: string }> {
    enteredStepless?.();
    await new Promise<void>((resolve) => (releaseStepless = resolve));
    return { summary: 'ran to its end' };
  }
}

describe('cancel is durable', () => {
  const database = useDatabase();
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    // Two worlds on one database: node-a in the default env, node-b in env rc. Each has its own
    // durable bus channel, so no cancel message of b's could ever reach a.
    a = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'node-a', workClaims: 'postgres' },
      providers: [CancellableActor],
    });
    b = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'node-b', env: 'rc', workClaims: 'postgres' },
      providers: [CancellableActor],
    });
  });

  afterAll(async () => {
    release?.();
    releaseStepless?.();
    await Promise.all([a?.close(), b?.close()]);
  });

  it('a cancel that no bus message brings to a run that takes no step still ends it canceled, not done', async () => {
    const inside = new Promise<void>((resolve) => (enteredStepless = resolve));
    const started = await a.get(Episodes).trigger('cancellable', 'stepless', {});
    const id = (started as { episode: { id: string } }).episode.id;
    await inside;
    // From env rc: its message goes over rc's channel, which node-a does not hear.
    expect(await b.get(Episodes).cancel(id)).toBe('requested');
    releaseStepless?.();
    await waitFor(
      'the episode to end',
      async () => (await a.get(Episodes).get(id))?.status !== 'running',
    );
    // The method had already run (no step to stop it before): the cancel still decides the end.
    expect(await a.get(Episodes).get(id)).toMatchObject({
      status: 'canceled',
      errorClass: 'canceled',
      summary: null,
    });
  });

  it('a cancel sent while the running node hears no bus at all still stops it before its next step, across envs', async () => {
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const started = await a.get(Episodes).trigger('cancellable', 'work', {});
    const id = (started as { episode: { id: string } }).episode.id;
    await inside;
    // node-a's bus is down: no LISTEN, no reads.
    await a.get<Bus & { stop(): Promise<void> }>(CYCLIUM_BUS_TRANSPORT).stop();

    expect(await b.get(Episodes).cancel(id)).toBe('requested');
    expect(
      (
        await database.db.query(`SELECT cancel_requested_at FROM cyclium_episodes WHERE id = $1`, [
          id,
        ])
      ).rows[0].cancel_requested_at,
    ).toBeInstanceOf(Date);
    release?.();
    await waitFor(
      'the episode to end',
      async () => (await a.get(Episodes).get(id))?.status !== 'running',
    );
    expect(await a.get(Episodes).get(id)).toMatchObject({
      status: 'canceled',
      errorClass: 'canceled',
    });
    expect(steps).toEqual(['first']);
    expect(await b.get(Episodes).cancel(id)).toBe('finished');
    expect(await b.get(Episodes).cancel('00000000-0000-4000-8000-000000000000')).toBe('not_found');
  });

  it('a cancel meeting a node taking the wake-up neither waits for it nor deadlocks: the take ends the request and starts nothing', async () => {
    const started = await a.get(Episodes).trigger('cancellable', 'sleeper', {});
    const id = (started as { episode: { id: string } }).episode.id;
    const request = await waitFor('the sleep to schedule its wake-up', async () => {
      const { rows } = await database.db.query<{ id: string }>(
        `SELECT r.id FROM cyclium_trigger_requests r JOIN cyclium_episodes e ON e.id = r.episode_id
          WHERE r.episode_id = $1 AND r.status = 'scheduled' AND e.status = 'waiting'`,
        [id],
      );
      return rows[0]?.id;
    });
    // A poller's take: the request first, then (below) the episode, in one transaction.
    const taker = await database.db.connect();
    try {
      await taker.query('BEGIN');
      const took = await taker.query(
        `UPDATE cyclium_trigger_requests
            SET status = 'completed', claimed_by = 'taker', claimed_at = now(), completed_at = now()
          WHERE id = $1 AND status IN ('pending', 'scheduled')`,
        [request],
      );
      expect(took.rowCount).toBe(1);
      // The cancel locks the episode, then skips the request the taker holds rather than wait.
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve('the cancel waited for the take'), 10_000);
      });
      const result = await Promise.race([a.get(Episodes).cancel(id), waited]);
      clearTimeout(timer);
      expect(result).toBe('canceled');
      const resumed = await taker.query(
        `UPDATE cyclium_episodes SET status = 'running', started_at = now()
          WHERE id = $1 AND status IN ('deferred', 'waiting') RETURNING id`,
        [id],
      );
      expect(resumed.rows).toEqual([]);
      await taker.query('COMMIT');
    } finally {
      await taker.query('ROLLBACK').catch(() => undefined);
      taker.release();
    }
    const { rows } = await database.db.query(
      `SELECT status, claimed_by FROM cyclium_trigger_requests WHERE episode_id = $1`,
      [id],
    );
    expect(rows).toEqual([{ status: 'completed', claimed_by: 'taker' }]);
    expect(await a.get(Episodes).get(id)).toMatchObject({ status: 'canceled' });
  });
});
