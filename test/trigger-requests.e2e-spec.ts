import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  ActorDefinitionError,
  CycliumConfigError,
  Episodes,
  Expectation,
  Mode,
  Recovery,
  TriggerRequests,
  UnknownActorError,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { TriggerPoller } from '../libs/cyclium/src/dispatch/trigger-poller.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ranOn: string[] = [];
const TTL_MS = 1_500;

@Injectable()
@Actor({ id: 'deferrable', maxConcurrentEpisodes: 20 })
class DeferrableActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart' })
  async job(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('only', () =>
      ranOn.push(
        `${ep.trigger.payload.tag}@${ep.episode.ownerNode}${ep.resumed ? ':resumed' : ''}`,
      ),
    );
  }
}

describe('trigger requests: the poller, the TTL and env scoping', () => {
  const database = useDatabase();
  const apps = new Map<string, INestApplicationContext>();

  const bus = new LocalBus();
  const failedEvents: Array<{ episodeId: string; status: string; errorClass?: string }> = [];

  beforeAll(async () => {
    bus.subscribe<(typeof failedEvents)[number]>(
      'episode.failed',
      (event) => void failedEvents.push(event.payload),
    );
    const boot = (
      id: string,
      mode: 'full' | 'trigger_only',
      env: string | null,
      triggerPollIntervalMs = 100,
    ) =>
      startCycliumApp({
        url: database.url,
        cyclium: {
          nodeIdentity: id,
          mode,
          env,
          workClaims: 'postgres',
          bus,
          triggerPollIntervalMs,
          triggerRequestTtlMs: TTL_MS,
          recovery: { onBoot: false, staleAfterMs: 1_000 },
        },
        providers: [DeferrableActor],
      }).then((app) => apps.set(id, app));
    await Promise.all([
      boot('full-default', 'full', null),
      boot('full-rc', 'full', 'rc'),
      boot('trigger-default', 'trigger_only', null),
      boot('trigger-rc', 'trigger_only', 'rc'),
      // Envs with no full node: one with two trigger-only nodes, where a request waits until a full
      // node comes; one whose node is switched to full, polling so rarely that only the switch explains a prompt run.
      boot('trigger-solo-1', 'trigger_only', 'solo'),
      boot('trigger-solo-2', 'trigger_only', 'solo'),
      boot('switcher', 'trigger_only', 'sw', 600_000),
      boot('actor-switcher', 'trigger_only', 'sw-actor', 600_000),
    ]);
  });

  afterAll(async () => {
    await Promise.all([...apps.values()].map((app) => app.close()));
  });

  const app = (id: string) => apps.get(id) as INestApplicationContext;
  const episodeRow = async (id: string) =>
    (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
  const requestsOf = async (episodeId: string) =>
    app('full-default').get(TriggerRequests).forEpisode(episodeId);
  const defer = async (node: string, tag: string) => {
    const result = await app(node).get(Episodes).trigger('deferrable', 'job', { tag });
    if (result.status !== 'deferred') throw new Error(`${tag} was ${result.status}`);
    return result;
  };

  it('Mode: node-wide and per actor, changed at runtime, checked, and reported', () => {
    const mode = app('full-default').get(Mode);
    expect(mode.status()).toEqual({
      nodeMode: 'full',
      overrides: {},
      nodeIdentity: 'full-default',
      paused: [],
    });
    mode.setActorOverride('deferrable', 'trigger_only');
    expect(mode.of('deferrable')).toBe('trigger_only');
    expect(mode.of('other')).toBe('full');
    expect(mode.status().overrides).toEqual({ deferrable: 'trigger_only' });
    mode.clearActorOverride('deferrable');
    mode.setActorOverride('deferrable', 'disabled');
    mode.clearAllOverrides();
    expect(mode.status().overrides).toEqual({});
    expect(() => mode.set('sideways' as never)).toThrow(CycliumConfigError);
    expect(mode.current).toBe('full');
  });

  it('Mode.setActorOverride refuses an actor this node does not host, naming it, and keeps the overrides as they were', () => {
    const mode = app('full-default').get(Mode);
    const refusal = (() => {
      try {
        mode.setActorOverride('deferable', 'disabled');
      } catch (error) {
        return error;
      }
    })();
    expect(refusal).toBeInstanceOf(UnknownActorError);
    expect(refusal).toMatchObject({ name: 'UnknownActorError', actorId: 'deferable' });
    expect((refusal as Error).message).toBe(
      'Mode.setActorOverride: no actor "deferable" is hosted on this node (hosted: deferrable)',
    );
    expect(mode.status().overrides).toEqual({});
    expect(mode.of('deferable')).toBe('full');
  });

  it.each([
    ['a node', 'switcher', (mode: Mode) => mode.set('full')],
    ['an actor', 'actor-switcher', (mode: Mode) => mode.setActorOverride('deferrable', 'full')],
  ])(
    '%s switched from trigger_only to full takes its backlog at once: its own queue, and what it deferred meanwhile',
    async (_, id, toFull) => {
      const node = app(id);
      const queued = await node.get(Episodes).create({
        actorId: 'deferrable',
        expectationId: 'job',
        payload: { tag: `${id}-queued` },
        status: 'queued',
        ownerNode: id,
      });
      const deferred = await defer(id, `${id}-deferred`);
      toFull(node.get(Mode));
      await waitFor(
        'both to run on the switched node',
        async () =>
          (await episodeRow(queued.id)).status === 'done' &&
          (await episodeRow(deferred.episode.id)).status === 'done',
        5_000,
      );
      expect(ranOn).toEqual(expect.arrayContaining([`${id}-queued@${id}`, `${id}-deferred@${id}`]));
    },
  );

  it('a request in an env with no full node waits; a full node there not hosting it has it expire, once', async () => {
    const lonely = await defer('trigger-solo-1', 'lonely');
    const [request] = await requestsOf(lonely.episode.id);
    const since = `SELECT now() - $1::timestamptz > make_interval(secs => $2) AS past`;
    const past = async () =>
      (await database.db.query(since, [request?.insertedAt, (3 * TTL_MS) / 1000])).rows[0].past;
    await waitFor('three TTLs to pass', past, TTL_MS * 6, 100);
    expect((await requestsOf(lonely.episode.id))[0]?.status).toBe('pending');
    // A full node that hosts no actor comes up there: the TTL runs from then.
    const full = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'full-solo',
        env: 'solo',
        workClaims: 'postgres',
        bus,
        triggerPollIntervalMs: 100,
        triggerRequestTtlMs: TTL_MS,
      },
    });
    apps.set('full-solo', full);
    await waitFor(
      'the TTL to expire it',
      async () => (await requestsOf(lonely.episode.id))[0]?.status === 'expired',
      TTL_MS * 6,
      100,
    );
    expect(await episodeRow(lonely.episode.id)).toMatchObject({
      status: 'failed',
      error_class: 'trigger_request_expired',
    });
    await waitFor('its terminal event', () =>
      failedEvents.some((e) => e.episodeId === lonely.episode.id),
    );
    expect(failedEvents.filter((e) => e.episodeId === lonely.episode.id)).toHaveLength(1);
  });

  it('a disabled node fires nothing: a manual trigger is refused and writes no row', async () => {
    const mode = app('trigger-default').get(Mode);
    mode.set('disabled');
    try {
      await expect(
        app('trigger-default').get(Episodes).trigger('deferrable', 'job', { tag: 'disabled' }),
      ).rejects.toThrow(ActorDefinitionError);
      expect(
        (
          await database.db.query(
            `SELECT * FROM cyclium_episodes WHERE trigger_ref->'payload'->>'tag' = 'disabled'`,
          )
        ).rows,
      ).toEqual([]);
    } finally {
      mode.set('trigger_only');
    }
  });

  it("each env's full node runs only its own env's requests", async () => {
    const own = await defer('trigger-default', 'env-default');
    const rc = await defer('trigger-rc', 'env-rc');
    await waitFor(
      'both to run',
      async () =>
        (await episodeRow(own.episode.id)).status === 'done' &&
        (await episodeRow(rc.episode.id)).status === 'done',
    );
    expect(await episodeRow(own.episode.id)).toMatchObject({
      owner_node: 'full-default',
      source_env: null,
    });
    expect(await episodeRow(rc.episode.id)).toMatchObject({
      owner_node: 'full-rc',
      source_env: 'rc',
    });
    expect((await requestsOf(rc.episode.id))[0]).toMatchObject({
      status: 'completed',
      claimedBy: 'full-rc',
      sourceEnv: 'rc',
    });
  });

  it('a request whose episode row was deleted ends failed with the reason, and the rest are still dispatched', async () => {
    const mode = app('full-default').get(Mode);
    mode.set('trigger_only'); // hold the requests back while the row goes
    const doomed = await defer('trigger-default', 'doomed');
    const fine = await defer('trigger-default', 'fine');
    await database.db.query(`DELETE FROM cyclium_episodes WHERE id = $1`, [doomed.episode.id]);
    mode.set('full');
    await app('full-default').get(TriggerPoller).pollNow();
    await waitFor(
      'the fine one to run',
      async () => (await episodeRow(fine.episode.id))?.status === 'done',
    );
    // Each request is dispatched on its own: the fine one's episode can end before the doomed
    // one's failure is written.
    const failed = await waitFor('the doomed request to end', async () => {
      const [request] = await requestsOf(doomed.episode.id);
      return request?.status === 'pending' ? undefined : request;
    });
    expect(failed).toMatchObject({
      status: 'failed',
      error: `episode ${doomed.episode.id} no longer exists`,
    });
  });

  it('a request for an actor no full node hosts stays pending, then expires after the TTL with the reason', async () => {
    const { rows } = await database.db.query(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, status) VALUES ('ghost', 'haunt', 'manual', 'deferred') RETURNING id`,
    );
    const episodeId = rows[0].id as string;
    await database.db.query(
      `INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node) VALUES ($1, 'ghost', 'haunt', 'elsewhere')`,
      [episodeId],
    );
    await app('full-default').get(TriggerPoller).pollNow();
    expect((await requestsOf(episodeId))[0]).toMatchObject({ status: 'pending' }); // never failed here: it is not ours to run
    await waitFor(
      'the TTL to expire it',
      async () => (await requestsOf(episodeId))[0]?.status === 'expired',
      TTL_MS * 6,
      100,
    );
    expect((await requestsOf(episodeId))[0]?.error).toMatch(
      /pending for more than 1500 ms: no full node that hosts ghost took it/,
    );
    expect(await episodeRow(episodeId)).toMatchObject({
      status: 'failed',
      error_class: 'trigger_request_expired',
    });
    // Like every terminal path, the expiry publishes the episode's terminal event (a workflow waits on it).
    await waitFor('its terminal event', () => failedEvents.some((e) => e.episodeId === episodeId));
    expect(failedEvents.filter((e) => e.episodeId === episodeId)).toEqual([
      expect.objectContaining({ status: 'failed', errorClass: 'trigger_request_expired' }),
    ]);
  });

  it('a request already older than the TTL expires instead of running', async () => {
    const mode = app('full-default').get(Mode);
    mode.set('trigger_only');
    const stale = await defer('trigger-default', 'stale');
    await database.db.query(
      `UPDATE cyclium_trigger_requests SET inserted_at = now() - interval '1 hour' WHERE episode_id = $1`,
      [stale.episode.id],
    );
    mode.set('full');
    await waitFor(
      'it to expire',
      async () => (await requestsOf(stale.episode.id))[0]?.status === 'expired',
      TTL_MS * 6,
      100,
    );
    expect(ranOn.filter((r) => r.startsWith('stale@'))).toEqual([]);
  });

  it('recovery on a trigger-only node defers the restart to a full node, which resumes it', async () => {
    const orphan = await app('trigger-default')
      .get(Episodes)
      .create({
        actorId: 'deferrable',
        expectationId: 'job',
        payload: { tag: 'orphan' },
        startedAt: new Date(Date.now() - 60_000),
        ownerNode: 'node-dead',
      });
    expect(await app('trigger-default').get(Recovery).sweep()).toMatchObject({
      restarted: 0,
      deferred: 1,
    });
    await waitFor(
      'a full node to resume it',
      async () => (await episodeRow(orphan.id)).status === 'done',
    );
    expect(await episodeRow(orphan.id)).toMatchObject({ owner_node: 'full-default', attempts: 1 });
    expect(ranOn).toContain('orphan@full-default:resumed');
    expect((await requestsOf(orphan.id))[0]).toMatchObject({
      status: 'completed',
      opts: { resume: true },
      sourceNode: 'trigger-default',
    });
  });
});
