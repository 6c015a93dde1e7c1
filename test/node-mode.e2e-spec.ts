import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Bus, CycliumStatus, Expectation, Mode, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Peers rank only nodes whose row says they take triggers, so a runtime mode change must reach the row. */
describe('cyclium_nodes.mode follows Mode.set', () => {
  const database = useDatabase();
  let app: INestApplicationContext | undefined;

  afterAll(async () => {
    await app?.close();
  });

  const modeInRow = async () =>
    (
      await database.db.query<{ mode: string }>(
        `SELECT mode FROM cyclium_nodes WHERE node_identity = 'mode-node'`,
      )
    ).rows[0]?.mode;

  it('writes each change at once, not at the next beat', async () => {
    // A beat a minute apart: only the change itself can write the row within the wait below.
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'mode-node', nodeBeatIntervalMs: 60_000 },
      providers: [],
    });
    expect(await modeInRow()).toBe('full');
    app.get(Mode).set('disabled');
    await waitFor('the row to say disabled', async () => (await modeInRow()) === 'disabled', 3_000);
    app.get(Mode).set('trigger_only');
    await waitFor(
      'the row to say trigger_only',
      async () => (await modeInRow()) === 'trigger_only',
      3_000,
    );
  });
});

@Injectable()
@Actor({ id: 'paused_actor' })
class PausedActor {
  @Expectation({ id: 'on_event', trigger: { event: 'mode.paused' } })
  async run(ep: EpisodeContext<{ n: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.n);
  }
}

@Injectable()
@Actor({ id: 'boot_paused_actor' })
class BootPausedActor {
  @Expectation({ id: 'on_event', trigger: { event: 'mode.boot_paused' } })
  async run(ep: EpisodeContext<{ n: number }>): Promise<void> {
    await ep.step('s1', () => ep.trigger.payload.n);
  }
}

/**
 * An actor disabled on its only node, per actor or node-wide: the events published meanwhile are
 * not held in memory, run once each when it is enabled again, and its stored position moves past them.
 */
describe('events of a disabled actor', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const read: string[] = [];

  beforeAll(async () => {
    const cyclium = { nodeIdentity: 'paused-node' };
    app = await startCycliumApp({ url: database.url, cyclium, providers: [PausedActor] });
    // The host's own handler hears every read of the channel, the actor's consumer or not.
    app.get(Bus).subscribe('mode.paused', (event) => void read.push(event.eventId));
  });

  afterAll(async () => {
    await app?.close();
  });

  const episodes = async (prefix: string) =>
    (
      await database.db.query<{ event_id: string; status: string }>(
        `SELECT trigger_ref->>'eventId' AS event_id, status FROM cyclium_episodes
          WHERE actor_id = 'paused_actor' AND starts_with(trigger_ref->>'eventId', $1)`,
        [prefix],
      )
    ).rows;
  const passed = async (ids: readonly string[]) => {
    const { rows } = await database.db.query<{ passed: boolean }>(
      `SELECT pg_visible_in_snapshot(e.tx_id, p.position) AS passed
         FROM cyclium_events e
         JOIN cyclium_bus_positions p ON p.channel = e.channel AND p.consumer = 'paused_actor.on_event'
        WHERE e.event_id = ANY($1::text[])`,
      [ids],
    );
    return rows.length === ids.length && rows.every((r) => r.passed);
  };

  it('runs what a node disabled since its boot read, once enabled, for an expectation with no position', async () => {
    const cyclium = { nodeIdentity: 'boot-disabled', mode: 'disabled' as const };
    const booted = await startCycliumApp({
      url: database.url,
      cyclium,
      providers: [BootPausedActor],
    });
    try {
      const heard: string[] = [];
      booted.get(Bus).subscribe('mode.boot_paused', (event) => void heard.push(event.eventId));
      const ids = ['boot-0', 'boot-1', 'boot-2'];
      for (const [n, id] of ids.entries())
        await booted.get(Bus).publish('mode.boot_paused', { n }, { eventId: id });
      await waitFor('the node to read the events', () => ids.every((id) => heard.includes(id)));
      booted.get(Mode).set('full');
      // Before, its position was opened where the node's reader had got to: past them, so they never ran.
      const count = `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'boot_paused_actor'`;
      const ran = async () => (await database.db.query<{ n: number }>(count)).rows[0]?.n;
      await waitFor('the 3 episodes', async () => (await ran()) === 3);
    } finally {
      await booted.close();
    }
  });

  for (const how of ['per actor', 'node-wide'] as const) {
    it(`runs what was published while disabled ${how} once enabled again, holding nothing meanwhile`, async () => {
      const mode = app.get(Mode);
      if (how === 'per actor') mode.setActorOverride('paused_actor', 'disabled');
      else mode.set('disabled');
      const prefix = how === 'per actor' ? 'actor-' : 'node-';
      const ids = Array.from({ length: 5 }, (_, i) => `${prefix}${i}`);
      for (const [n, id] of ids.entries())
        await app.get(Bus).publish('mode.paused', { n }, { eventId: id });
      await waitFor('the node to read the events', () => ids.every((id) => read.includes(id)));
      expect(await episodes(prefix)).toEqual([]);
      // Nothing of them waits in memory: the consumer is not reading while the actor is disabled.
      expect(app.get(CycliumStatus).snapshot().bus?.unsettledEvents).toBe(0);

      if (how === 'per actor') mode.clearActorOverride('paused_actor');
      else mode.set('full');
      // Before, they never ran: each stayed unsettled in memory, and the position stopped before the first.
      const done = async () => (await episodes(prefix)).filter((e) => e.status === 'done').length;
      await waitFor(`the ${ids.length} episodes done`, async () => (await done()) === ids.length);
      expect((await episodes(prefix)).map((e) => e.event_id).sort()).toEqual(ids);
      await waitFor('the stored position past them', () => passed(ids));
      expect(app.get(CycliumStatus).snapshot().bus?.unsettledEvents).toBe(0);
    });
  }
});
