import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type Bus, type EpisodeContext } from '@cyclium/nestjs';
import { CYCLIUM_BUS_TRANSPORT } from '../libs/cyclium/src/cyclium.constants.js';
import { CANCEL_EVENT } from '../libs/cyclium/src/episodes/episode-events.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let entered: (() => void) | undefined;
let release: (() => void) | undefined;
const seconds: string[] = [];

@Injectable()
@Actor({ id: 'forged_cancel' })
class GatedActor {
  /** Blocks in its first step until released or stopped, so only a stop on the cancel event itself can end it early. */
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext): Promise<void> {
    await ep.step('first', async () => {
      entered?.();
      await Promise.race([
        new Promise<void>((resolve) => (release = resolve)),
        new Promise((resolve) => ep.signal.addEventListener('abort', resolve)),
      ]);
    });
    await ep.step('second', () => void seconds.push(ep.episode.id));
  }
}

/**
 * A `cyclium.episode.cancel` event is a wake-up, not an order: any service that may publish on the
 * bus (INSERT on cyclium_events) could write one. The running node stops an episode on it only when
 * the episode's row says a cancel was requested, which only Episodes.cancel (and a workflow's cancel) sets.
 */
describe('a cancel event nobody requested', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'forged-node', workClaims: 'postgres' },
      providers: [GatedActor],
    });
  });

  afterAll(async () => {
    release?.();
    await app?.close();
  });

  async function startGated(): Promise<string> {
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const started = await app.get(Episodes).trigger('forged_cancel', 'work', {});
    await inside;
    return (started as { episode: { id: string } }).episode.id;
  }

  it('stops nothing: the episode runs on to done', async () => {
    const id = await startGated();
    // Written through the transport, past the in-process guard on reserved types: a row in cyclium_events, as a forger would insert.
    const transport = app.get<Bus>(CYCLIUM_BUS_TRANSPORT);
    let heard!: () => void;
    const delivered = new Promise<void>((resolve) => (heard = resolve));
    const off = transport.subscribe<{ episodeId: string }>(CANCEL_EVENT, (event) => {
      if (event.payload.episodeId === id) heard();
    });
    try {
      await transport.publish(CANCEL_EVENT, { episodeId: id });
      // The runner's subscription was called before this one (it subscribed at boot).
      await delivered;
    } finally {
      off();
    }
    // Before this change the run stopped right there; now it reads the row's flag, finds no cancel and goes on.
    release?.();
    await waitFor(
      'the episode to end',
      async () => (await app.get(Episodes).get(id))?.status !== 'running',
    );
    expect(await app.get(Episodes).get(id)).toMatchObject({ status: 'done' });
    expect(seconds).toContain(id);
  });

  it('still stops a run at once when the cancel was requested', async () => {
    const id = await startGated();
    expect(await app.get(Episodes).cancel(id)).toBe('requested');
    // Not released: only the prompt stop on the event ends its first step.
    await waitFor(
      'the episode to end canceled',
      async () => (await app.get(Episodes).get(id))?.status === 'canceled',
      10_000,
    );
    expect(seconds).not.toContain(id);
  });
});
