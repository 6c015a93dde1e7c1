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
}

describe('cancel is durable', () => {
  const database = useDatabase();
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    // Two worlds on one database: node-a in the default env, node-b in env rc. Each has its own
    // durable bus channel, so no cancel message of b's could ever reach a.
    a = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'node-a', workClaims: 'postgres' }, providers: [CancellableActor] });
    b = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'node-b', env: 'rc', workClaims: 'postgres' }, providers: [CancellableActor] });
  });

  afterAll(async () => {
    release?.();
    await Promise.all([a?.close(), b?.close()]);
  });

  it('a cancel sent while the running node hears no bus at all still stops it before its next step, across envs', async () => {
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const started = await a.get(Episodes).trigger('cancellable', 'work', {});
    const id = (started as { episode: { id: string } }).episode.id;
    await inside;
    // node-a's bus is down: no LISTEN, no reads.
    await a.get<Bus & { stop(): Promise<void> }>(CYCLIUM_BUS_TRANSPORT).stop();

    expect(await b.get(Episodes).cancel(id)).toBe('requested');
    expect((await database.db.query(`SELECT cancel_requested_at FROM cyclium_episodes WHERE id = $1`, [id])).rows[0].cancel_requested_at).toBeInstanceOf(Date);
    release?.();
    await waitFor('the episode to end', async () => (await a.get(Episodes).get(id))?.status !== 'running');
    expect(await a.get(Episodes).get(id)).toMatchObject({ status: 'canceled', errorClass: 'canceled' });
    expect(steps).toEqual(['first']);
    expect(await b.get(Episodes).cancel(id)).toBe('finished');
    expect(await b.get(Episodes).cancel('00000000-0000-4000-8000-000000000000')).toBe('not_found');
  });
});
