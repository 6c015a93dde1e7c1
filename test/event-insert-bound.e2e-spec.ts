import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { Injectable } from '@nestjs/common';
import { Actor, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { ActorRegistry } from '../libs/cyclium/src/actors/actor-registry.service.js';
import type { RegisteredExpectation } from '../libs/cyclium/src/actors/registered-actor.js';
import { Dispatcher } from '../libs/cyclium/src/dispatch/dispatcher.service.js';
import type { DispatchOptions } from '../libs/cyclium/src/dispatch/dispatch-result.js';
import type { EpisodeTrigger } from '../libs/cyclium/src/episodes/episode-context.interface.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let release: () => void = () => undefined;

@Injectable()
@Actor({ id: 'bounded', maxConcurrentEpisodes: 1 })
class BoundedActor {
  @Expectation({ id: 'run', trigger: 'manual' })
  async run(ep: EpisodeContext): Promise<void> {
    await ep.step('hold', () => new Promise<void>((resolve) => (release = resolve)));
  }
}

/**
 * The bound a bus event's trigger carries to the insert of its episode (`insertBefore`: past it,
 * the event's old episode may be archived and its key free), checked by the database clock in the
 * insert itself on every path an episode of an event is written by: a begin, a queued row, a
 * trigger that waited in memory for a slot, and a drain's handover (a deferred row). Past the
 * bound each answers `duplicate` and writes nothing; before it, each writes as always.
 */
describe('the insert bound of an event trigger', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let dispatcher: Dispatcher;
  let expectation: RegisteredExpectation;
  const trigger: EpisodeTrigger = { type: 'manual', payload: {} };
  const options = (
    key: string,
    insertBefore: Date,
    more: Partial<DispatchOptions> = {},
  ): DispatchOptions => ({
    dedupeKey: key,
    sourceStack: null,
    sourceEnv: null,
    insertBefore,
    ...more,
  });
  const past = () => new Date(Date.now() - 60_000);
  const later = () => new Date(Date.now() + 60_000);
  const count = async (sql: string, params: unknown[] = []) =>
    Number((await database.db.query(sql, params)).rows[0].n);
  const rowsOf = (key: string) =>
    count(`SELECT count(*) AS n FROM cyclium_episodes WHERE dedupe_key = $1`, [key]);
  const dispatch = (key: string, bound: Date, more: Partial<DispatchOptions> = {}) => {
    return dispatcher.dispatch(expectation, trigger, options(key, bound, more));
  };
  const handOver = (key: string, bound: Date) =>
    dispatcher.handOver(expectation, trigger, options(key, bound));

  beforeAll(async () => {
    app = await startCycliumApp({ url: database.url, providers: [BoundedActor] });
    dispatcher = app.get(Dispatcher);
    expectation = app.get(ActorRegistry).expectation('bounded', 'run') as RegisteredExpectation;
  });

  afterAll(async () => {
    release();
    await app?.close();
  });

  it('refuses a begin, a queued row, a waiting trigger and a handover past the bound; writes them before', async () => {
    expect((await dispatch('begin-past', past())).status).toBe('duplicate');
    expect((await dispatch('begin', later())).status).toBe('started');
    await waitFor('the only slot to be taken', () => dispatcher.canStartNow('bounded') === false);

    expect((await dispatch('queued-past', past())).status).toBe('duplicate');
    expect((await dispatch('queued', later())).status).toBe('queued');

    // Within its bound when it begins to wait, past it when the slot frees.
    const bound = new Date(Date.now() + 300);
    const waited = dispatch('waited-past', bound, { waitForSlot: true });
    await waitFor('the bound to pass', () => Date.now() > bound.getTime() + 100);
    release();
    expect((await waited).status).toBe('duplicate');
    const running = `SELECT count(*) AS n FROM cyclium_episodes WHERE dedupe_key = 'queued' AND status = 'running'`;
    await waitFor('the queued episode to take the slot', async () => (await count(running)) === 1);
    release();

    expect((await handOver('handover-past', past())).status).toBe('duplicate');
    expect((await handOver('handover', later())).status).toBe('deferred');

    for (const key of ['begin-past', 'queued-past', 'waited-past', 'handover-past'])
      expect(await rowsOf(key)).toBe(0);
    for (const key of ['begin', 'queued', 'handover']) expect(await rowsOf(key)).toBe(1);
  });
});
