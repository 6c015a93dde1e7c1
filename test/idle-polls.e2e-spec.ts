import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  Actor,
  Episodes,
  Expectation,
  TriggerRequests,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const TICK_MS = 200;
const IDLE_MS = 8_000;

@Injectable()
@Actor({ id: 'idle_work', maxConcurrentEpisodes: 4 })
class IdleWorkActor {
  @Expectation({ id: 'job', trigger: 'manual' })
  async job(ep: EpisodeContext): Promise<void> {
    await ep.step('only', () => ep.episode.ownerNode);
  }

  @Expectation({ id: 'approval', trigger: 'manual' })
  async approval(ep: EpisodeContext): Promise<void> {
    await ep.waitForSignal('go');
  }
}

/** One slot per node: while it is taken, a poll reads nothing of this actor's. */
@Injectable()
@Actor({ id: 'idle_slot', maxConcurrentEpisodes: 1 })
class IdleSlotActor {
  @Expectation({ id: 'hold', trigger: 'manual' })
  async hold(ep: EpisodeContext<{ ms: number }>): Promise<void> {
    await ep.step('hold', () => sleep(ep.trigger.payload.ms));
  }
}

/**
 * An idle trigger poller (the `postgres` bus, `triggerPollIdleIntervalMs`): two full nodes and a
 * trigger-only one, in this process, on a real database and bus. Idle, a full node polls once per
 * idle interval rather than every tick; what another node defers wakes it at once over the bus,
 * and a run for later is started when due, which the poll that heard of it read in the same
 * statement — not at the end of the idle interval. (A deadline written on the node itself, and one
 * whose node is kill -9-ed: waits-faults.)
 */
describe('idle trigger polls', () => {
  const database = useDatabase();
  const apps = new Map<string, INestApplicationContext>();

  beforeAll(async () => {
    const boot = async (id: string, mode: 'full' | 'trigger_only') =>
      apps.set(
        id,
        await startCycliumApp({
          url: database.url,
          cyclium: {
            nodeIdentity: id,
            mode,
            workClaims: 'postgres',
            triggerPollIntervalMs: TICK_MS,
            triggerPollIdleIntervalMs: IDLE_MS,
            recovery: { onBoot: false },
          },
          providers: [IdleWorkActor, IdleSlotActor],
        }),
      );
    await Promise.all([
      boot('idle-a', 'full'),
      boot('idle-b', 'full'),
      boot('idle-t', 'trigger_only'),
    ]);
  });

  afterAll(async () => {
    await Promise.all([...apps.values()].map((app) => app.close()));
  });

  const app = (id: string) => apps.get(id) as INestApplicationContext;
  const statusOf = async (id: string) =>
    (
      await database.db.query<{ status: string; owner_node: string | null }>(
        `SELECT status, owner_node FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0];
  const deferOn = async (node: string, options: { delayMs?: number } = {}) => {
    const result = await app(node).get(Episodes).trigger('idle_work', 'job', {}, options);
    if (result.status !== 'deferred') throw new Error(`not deferred: ${result.status}`);
    return result.episode.id;
  };

  it('an idle full node polls once per idle interval, not at every tick', async () => {
    const polls = ['idle-a', 'idle-b'].map((id) =>
      jest.spyOn(app(id).get(TriggerRequests), 'poll'),
    );
    // A measurement window, not a wait for a condition: 20 ticks of each node pass in it.
    await sleep(20 * TICK_MS);
    const counts = polls.map((spy) => spy.mock.calls.length);
    polls.forEach((spy) => spy.mockRestore());
    // At most one idle interval ends inside the window (the boot's poll started it).
    for (const count of counts) expect(count).toBeLessThanOrEqual(1);
  });

  it('a run another node defers wakes the idle nodes at once over the bus', async () => {
    const started = performance.now();
    const id = await deferOn('idle-t');
    await waitFor(
      'the deferred run to end',
      async () => (await statusOf(id))?.status === 'done',
      IDLE_MS / 2,
      50,
    );
    const tookMs = performance.now() - started;
    console.log(
      `a deferred run ended ${tookMs.toFixed(0)} ms after it was written (idle ${IDLE_MS} ms)`,
    );
    expect(['idle-a', 'idle-b']).toContain((await statusOf(id))?.owner_node);
  });

  it('a signal resumes a wait at once on idle nodes (the wake-up the database writes for it)', async () => {
    const started = await app('idle-a').get(Episodes).trigger('idle_work', 'approval', {});
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('the wait', async () => (await statusOf(id))?.status === 'waiting', 5_000, 50);
    // The nodes idle: the wait has no deadline, so its wake-up is due never.
    const sent = performance.now();
    expect(await app('idle-b').get(Episodes).signal(id, 'go')).toMatchObject({ status: 'sent' });
    await waitFor(
      'the signalled wait to end',
      async () => (await statusOf(id))?.status === 'done',
      IDLE_MS / 2,
      50,
    );
    console.log(
      `a signalled wait ended ${(performance.now() - sent).toFixed(0)} ms after the signal`,
    );
  });

  it('a run deferred while its actor has no free slot anywhere starts once one frees, not at the end of the idle interval', async () => {
    const HOLD_MS = 1_500;
    const holds = await Promise.all(
      ['idle-a', 'idle-b'].map(async (node) => {
        const held = await app(node).get(Episodes).trigger('idle_slot', 'hold', { ms: HOLD_MS });
        if (!('episode' in held)) throw new Error(`not started: ${held.status}`);
        return held.episode.id;
      }),
    );
    const started = performance.now();
    const deferred = await app('idle-t').get(Episodes).trigger('idle_slot', 'hold', { ms: 10 });
    if (deferred.status !== 'deferred') throw new Error(`not deferred: ${deferred.status}`);
    // Both nodes heard the wake-up with their one slot taken: their polls read nothing of it.
    await waitFor(
      'the deferred run to end',
      async () => (await statusOf(deferred.episode.id))?.status === 'done',
      HOLD_MS + IDLE_MS / 2,
      50,
    );
    console.log(
      `a run deferred while every slot was taken ended ${(performance.now() - started).toFixed(0)} ms ` +
        `after it was written (the slots free after ${HOLD_MS} ms)`,
    );
    for (const id of holds) expect((await statusOf(id))?.status).toBe('done');
  });

  it('a run for later starts when due, which the poll that heard of it read, not at the end of the idle interval', async () => {
    const DELAY_MS = 2_000;
    const started = performance.now();
    const id = await deferOn('idle-t', { delayMs: DELAY_MS });
    await waitFor(
      'the run for later to end',
      async () => (await statusOf(id))?.status === 'done',
      DELAY_MS + IDLE_MS / 2,
      50,
    );
    const tookMs = performance.now() - started;
    console.log(
      `a run for later (${DELAY_MS} ms) ended ${tookMs.toFixed(0)} ms after it was written`,
    );
    expect(tookMs).toBeGreaterThanOrEqual(DELAY_MS);
  });
});
