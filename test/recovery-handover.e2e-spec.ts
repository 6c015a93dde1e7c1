import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, Logger, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, Recovery, type EpisodeContext } from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { EpisodeRunner } from '../libs/cyclium/src/episodes/episode-runner.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const STALE_MS = 300;
const runs: string[] = [];
const blocked: Array<() => void> = [];
/** Releases every blocked run: with claims off, a peer may have restarted a blocker that looked stale. */
let releaseBlocker: (() => void) | undefined;
const blocker = () =>
  new Promise<void>((resolve) => {
    blocked.push(resolve);
    releaseBlocker = () => blocked.splice(0).forEach((release) => release());
  });

@Injectable()
@Actor({ id: 'single', maxConcurrentEpisodes: 1 })
class SingleSlotActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart', maxAttempts: 3 })
  async job(ep: EpisodeContext<{ tag: string; block?: boolean }>): Promise<void> {
    runs.push(`${ep.trigger.payload.tag}:${ep.resumed ? 'resumed' : 'fresh'}`);
    await ep.step('only', async () => {
      if (ep.trigger.payload.block) await blocker();
      return ep.trigger.payload.tag;
    });
  }

  @Expectation({ id: 'once', trigger: 'manual', recoveryPolicy: 'fail' })
  async once(ep: EpisodeContext): Promise<void> {
    await ep.step('only', () => 1);
  }
}

function nodes(claims: boolean) {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];
  beforeAll(async () => {
    const bus = new LocalBus();
    for (const id of ['node-a', 'node-b']) {
      apps.push(
        await startCycliumApp({
          url: database.url,
          cyclium: {
            nodeIdentity: `${id}${claims ? '' : '-open'}`,
            workClaims: claims ? 'postgres' : false,
            workClaimsLeaseSeconds: 2,
            bus,
            recovery: { onBoot: false, staleAfterMs: STALE_MS },
            nodeBeatIntervalMs: 100,
          },
          providers: [SingleSlotActor],
        }),
      );
    }
  });
  afterAll(async () => {
    releaseBlocker?.();
    await Promise.all(apps.map((app) => app.close()));
  });
  const orphan = (expectation = 'job', tag = 'orphan', block = false) =>
    (apps[0] as INestApplicationContext).get(Episodes).create({
      actorId: 'single',
      expectationId: expectation,
      payload: block ? { tag, block } : { tag },
      startedAt: new Date(Date.now() - 60_000),
      ownerNode: 'node-dead',
    });
  const row = async (id: string) =>
    (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
  return { database, apps, orphan, row };
}

/** Sweeps from both nodes, again and again, for `forMs`: every chance to take the waiting restart a second time. */
async function sweepRepeatedly(apps: INestApplicationContext[], forMs: number): Promise<number> {
  let restarted = 0;
  const until = Date.now() + forMs;
  while (Date.now() < until) {
    for (const app of apps) restarted += (await app.get(Recovery).sweep()).restarted;
    await new Promise((r) => setTimeout(r, STALE_MS / 3));
  }
  return restarted;
}

describe('a restart recovery hands over keeps its claim while it waits for a slot', () => {
  const { database, apps, orphan, row } = nodes(true);

  afterEach(() => {
    jest.restoreAllMocks();
  });

  it("stays attempts = 1 behind a full slot for 3 × staleAfterMs, runs once, on the sweep's own fence", async () => {
    const [a] = apps as [INestApplicationContext];
    const blocking = await a
      .get(Episodes)
      .trigger('single', 'job', { tag: 'blocker', block: true });
    expect(blocking.status).toBe('started');
    const waiting = await orphan('job', 'waiting');
    const log = jest.spyOn(Logger.prototype, 'log');

    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    // The sweep says what it did, naming the node the episode was left by.
    expect(log.mock.calls.map((c) => String(c[0]))).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `took over episode ${waiting.id} \\(single\\.job\\) from node-dead .*fence 1: restarting, attempt 1 of 3`,
        ),
      ),
    );
    expect(await sweepRepeatedly(apps, 3 * STALE_MS)).toBe(0);
    expect(await row(waiting.id)).toMatchObject({
      status: 'running',
      phase: 'recovering',
      attempts: 1,
      owner_node: 'node-a',
    });
    // Busy to every peer all along: the claim the sweep took is still held, at its first fence.
    const claim = (
      await database.db.query(
        `SELECT state, owner_node, fence FROM cyclium_work_claims WHERE dedupe_key = $1`,
        [`episode:${waiting.id}`],
      )
    ).rows;
    expect(claim).toEqual([{ state: 'claimed', owner_node: 'node-a', fence: '1' }]);

    releaseBlocker?.();
    await waitFor('the restart to finish', async () => (await row(waiting.id)).status === 'done');
    expect(await row(waiting.id)).toMatchObject({ attempts: 1, phase: null });
    expect(runs.filter((r) => r.startsWith('waiting:'))).toEqual(['waiting:resumed']);
    const finished = (
      await database.db.query(
        `SELECT state, fence FROM cyclium_work_claims WHERE dedupe_key = $1`,
        [`episode:${waiting.id}`],
      )
    ).rows;
    expect(finished).toEqual([{ state: 'done', fence: '1' }]);
  });

  it('commits the take, the resumed marker and the claim together, or none of them', async () => {
    const [a] = apps as [INestApplicationContext];
    const episode = await orphan('job', 'atomic');
    // The marker cannot be written: the whole recovery must roll back, the claim it took included.
    await database.db.query(`
      CREATE FUNCTION refuse_marker() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.name = 'resumed' AND NEW.episode_id = '${episode.id}' THEN RAISE EXCEPTION 'marker refused'; END IF;
        RETURN NEW;
      END $$`);
    await database.db.query(
      `CREATE TRIGGER refuse_marker BEFORE INSERT ON cyclium_episode_steps FOR EACH ROW EXECUTE FUNCTION refuse_marker()`,
    );
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      expect(await a.get(Recovery).sweep()).toMatchObject({
        restarted: 0,
        skipped: 1,
        skippedFor: { error: 1 },
      });
      expect(warn.mock.calls.map((c) => String(c[0]))).toContainEqual(
        expect.stringContaining('marker refused'),
      );
      expect(await row(episode.id)).toMatchObject({
        status: 'running',
        phase: null,
        attempts: 0,
        owner_node: 'node-dead',
      });
      expect(
        (
          await database.db.query(`SELECT * FROM cyclium_work_claims WHERE dedupe_key = $1`, [
            `episode:${episode.id}`,
          ])
        ).rows,
      ).toEqual([]);
    } finally {
      await database.db.query(
        `DROP TRIGGER refuse_marker ON cyclium_episode_steps; DROP FUNCTION refuse_marker()`,
      );
    }
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    await waitFor('the restart to finish', async () => (await row(episode.id)).status === 'done');
    expect(await row(episode.id)).toMatchObject({ attempts: 1 });
  });

  it('fails a fail-policy orphan in one fenced transaction, naming the node that last owned it', async () => {
    const [, b] = apps as [INestApplicationContext, INestApplicationContext];
    const episode = await orphan('once', 'failing');
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    expect(await b.get(Recovery).sweep()).toMatchObject({ failed: 1 });
    const failed = await row(episode.id);
    expect(failed).toMatchObject({ status: 'failed', error_class: 'orphaned', attempts: 1 });
    expect(failed.error_detail).toContain('last owned by node-dead');
    expect(failed.error_detail).not.toContain('node-b');
    expect(warn.mock.calls.map((c) => String(c[0]))).toContainEqual(
      expect.stringContaining(`episode ${episode.id} (single.once) failed as orphaned`),
    );
    const claim = (
      await database.db.query(
        `SELECT state, owner_node FROM cyclium_work_claims WHERE dedupe_key = $1`,
        [`episode:${episode.id}`],
      )
    ).rows;
    expect(claim).toEqual([{ state: 'failed', owner_node: 'node-b' }]);
  });

  it('a restart that cannot start is logged and let go, and never becomes an unhandled rejection', async () => {
    const [a] = apps as [INestApplicationContext];
    const episode = await orphan('job', 'unstartable');
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const error = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    jest
      .spyOn(a.get(EpisodeRunner), 'startResumed')
      .mockRejectedValueOnce(
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      );
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    // A database that is away is an expected condition: one warning naming the episode and its actor, no error.
    await waitFor('the failure to be logged', () =>
      warn.mock.calls.some((c) =>
        String(c[0]).includes(`could not start recovered episode ${episode.id} (single.job)`),
      ),
    );
    expect(error.mock.calls.filter((c) => String(c[0]).includes(episode.id))).toEqual([]);
    // Let go: once its lease lapses, a sweep can take it again, and this time it runs.
    await waitFor(
      'a later sweep to restart it',
      async () => (await a.get(Recovery).sweep()).restarted === 1,
      10_000,
      200,
    );
    await waitFor('the restart to finish', async () => (await row(episode.id)).status === 'done');
    expect(await row(episode.id)).toMatchObject({ attempts: 2 });
  });
});

describe('with claims off, a waiting restart is protected by its live owner node', () => {
  const { database, apps, orphan, row } = nodes(false);

  it('is not a candidate while its node beats, so it stays attempts = 1 and runs once', async () => {
    const [a] = apps as [INestApplicationContext];
    const blocking = await a
      .get(Episodes)
      .trigger('single', 'job', { tag: 'open-blocker', block: true });
    expect(blocking.status).toBe('started');
    const waiting = await orphan('job', 'open-waiting');
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    // The blocker itself is quiet longer than staleAfterMs, so with claims off node b may restart it
    // (staleness is all recovery has: see docs/concepts/recovery.md). The waiting restart is never taken again.
    await sweepRepeatedly(apps, 3 * STALE_MS);
    expect(await row(waiting.id)).toMatchObject({ phase: 'recovering', attempts: 1 });
    releaseBlocker?.();
    await waitFor('the restart to finish', async () => (await row(waiting.id)).status === 'done');
    expect(runs.filter((r) => r.startsWith('open-waiting:'))).toEqual(['open-waiting:resumed']);
  });

  it('given its slot after a wait past staleAfterMs, its quiet time is new: no peer takes it mid-step', async () => {
    const [a, b] = apps as [INestApplicationContext, INestApplicationContext];
    const staleAfterMs = 1_500;
    const blocking = await a
      .get(Episodes)
      .trigger('single', 'job', { tag: 'open-hog', block: true });
    expect(blocking.status).toBe('started');
    const slow = await orphan('job', 'open-slow', true);
    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    const waitedLong = `SELECT 1 FROM cyclium_episode_steps
                         WHERE episode_id = $1 AND name = 'resumed' AND created_at < now() - make_interval(secs => $2)`;
    await waitFor(
      'the restart to have waited for its slot longer than staleAfterMs (database clock)',
      async () =>
        (await database.db.query(waitedLong, [slow.id, staleAfterMs / 1000])).rowCount === 1,
    );
    releaseBlocker?.();
    await waitFor(
      'the restart to be in its step',
      () => runs.includes('open-slow:resumed') && blocked.length === 1,
    );
    expect(await b.get(Recovery).sweep({ staleAfterMs })).toMatchObject({
      restarted: 0,
      failed: 0,
    });
    const untaken = { status: 'running', phase: null, owner_node: 'node-a-open', attempts: 1 };
    expect(await row(slow.id)).toMatchObject(untaken);
    releaseBlocker?.();
    await waitFor('the restart to finish', async () => (await row(slow.id)).status === 'done');
    expect(runs.filter((r) => r.startsWith('open-slow:'))).toEqual(['open-slow:resumed']);
  });
});
