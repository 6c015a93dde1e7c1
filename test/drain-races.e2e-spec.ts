import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { Injectable, Logger, type INestApplicationContext } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  Actor,
  Episodes,
  Expectation,
  onCyclium,
  Recovery,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { ActorSlots } from '../libs/cyclium/src/dispatch/actor-slots.service.js';
import { LeaseRenewer } from '../libs/cyclium/src/leases/lease-renewer.service.js';
import { EpisodeJournal } from '../libs/cyclium/src/episodes/episode-journal.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

@Injectable()
@Actor({ id: 'burst', maxConcurrentEpisodes: 100 })
class BurstActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ i: number }>): Promise<void> {
    await ep.step('first', () => ep.trigger.payload.i);
    // Mid-step when the drain comes, and deaf to its abort for longer than the drain waits: the
    // claim is still this run's, in memory, when the drain gives it up.
    await ep.step('second', () => sleep(1_000));
  }
}

const resumedInSecond: string[] = [];
let openResumed: () => void = () => undefined;
const resumedGate = new Promise<void>((resolve) => (openResumed = resolve));

@Injectable()
@Actor({ id: 'relay' })
class RelayActor {
  @Expectation({ id: 'work', trigger: 'manual', recoveryPolicy: 'restart' })
  async work(ep: EpisodeContext<{ hold?: boolean }>): Promise<void> {
    await ep.step('first', () => 'one');
    await ep.step('second', async ({ signal }) => {
      if (!ep.trigger.payload.hold) return 'two';
      if (!ep.resumed)
        return new Promise<string>((resolve) =>
          signal.addEventListener('abort', () => resolve('aborted')),
        );
      resumedInSecond.push(ep.episode.id);
      await resumedGate;
      return 'two';
    });
  }
}

describe('the drain, racing what is starting and what peers write', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];

  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(apps.splice(0).map((app) => app.close().catch(() => undefined)));
  });

  // Recovery sweeps only when a test asks (the first scheduled one is 2 min away), with staleness as long.
  const start = (id: string, workClaimsLeaseSeconds = 6) =>
    startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: id,
        workClaims: 'postgres',
        workClaimsLeaseSeconds,
        bus: new LocalBus(),
        episodeShutdownMs: 300,
      },
      providers: [BurstActor, RelayActor],
    }).then((app) => (apps.push(app), app));
  const close = async (app: INestApplicationContext) => {
    await app.close();
    apps.splice(apps.indexOf(app), 1);
  };
  const row = async (id: string) =>
    (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
  const waiters = async (event: string) =>
    (
      await database.db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = $1 AND datname = current_database()`,
        [event],
      )
    ).rows[0].n as number;

  it('a shutdown during a burst of triggers stamps every episode begun on the node, and reports no renew_failed', async () => {
    const app = await start('node-burst');
    let renewFailed = 0;
    const offFailed = onCyclium('work_claims.renew_failed', () => renewFailed++);
    // A renewal right after the drain released the claims: it must not report them as lost.
    let tickedAfterDrain: Promise<void> | undefined;
    const offDrained = onCyclium('drain.completed', () => {
      tickedAfterDrain = app.get(LeaseRenewer).tick();
    });
    try {
      const triggers = Array.from({ length: 60 }, (_, i) =>
        app
          .get(Episodes)
          .trigger('burst', 'work', { i })
          .catch(() => 'error'),
      );
      await waitFor(
        'the burst to be under way',
        async () =>
          (
            await database.db.query(
              `SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'burst'`,
            )
          ).rows[0].n >= 5,
      );
      await app.close();
      apps.splice(apps.indexOf(app), 1);
      await Promise.all(triggers);
      await tickedAfterDrain;
    } finally {
      offFailed();
      offDrained();
    }
    expect(tickedAfterDrain).toBeDefined();
    expect(renewFailed).toBe(0);
    const { rows } = await database.db.query(
      `SELECT e.id, e.status, e.phase, count(s.*) FILTER (WHERE s.name = 'interrupted')::int AS markers
         FROM cyclium_episodes e LEFT JOIN cyclium_episode_steps s ON s.episode_id = e.id
        WHERE e.actor_id = 'burst' GROUP BY e.id`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(5);
    const unstamped = rows.filter(
      (r) => r.status === 'running' && (r.phase !== 'interrupted' || r.markers !== 1),
    );
    expect(unstamped).toEqual([]);
    expect(rows.every((r) => r.status === 'running')).toBe(true); // none finished: each was mid-step
  });

  it('a marker that meets a position a peer just took is written at the next one: the journal never collides', async () => {
    const app = await start('node-marks');
    const journal = app.get(EpisodeJournal);
    const episode = await app
      .get(Episodes)
      .create({ actorId: 'burst', expectationId: 'work', payload: { i: 0 } });
    const peer = await database.db.connect();
    try {
      await peer.query('BEGIN');
      expect(await journal.mark([episode.id], 'resumed', { node: 'peer' }, peer)).toEqual([
        episode.id,
      ]);
      // Ours reads the same free position, then waits on the peer's uncommitted row at it.
      const ours = journal.mark([episode.id], 'interrupted', { node: 'node-marks' });
      await waitFor(
        'our insert to wait on the peer',
        async () =>
          (
            await database.db.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
            )
          ).rows[0].n >= 1,
      );
      await peer.query('COMMIT');
      expect(await ours).toEqual([episode.id]);
    } finally {
      peer.release();
    }
    const steps = await app.get(Episodes).steps(episode.id);
    expect(steps.map((s) => [s.stepNo, s.name])).toEqual([
      [1, 'resumed'],
      [2, 'interrupted'],
    ]);
  });

  it('one failing drain statement does not skip the rest of the shutdown: the node still gives its claims up and deregisters', async () => {
    const app = await start('node-stubborn');
    const started = await app.get(Episodes).trigger('burst', 'work', { i: 1 });
    const id = (started as { episode: { id: string } }).episode.id;
    await waitFor(
      'the episode to be mid-step',
      async () => (await app.get(Episodes).steps(id)).length === 1,
    );
    await database.db.query(`
      CREATE FUNCTION refuse_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.phase = 'interrupted' THEN RAISE EXCEPTION 'stamp refused'; END IF;
        RETURN NEW;
      END $$`);
    await database.db.query(
      `CREATE TRIGGER refuse_stamp BEFORE UPDATE ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION refuse_stamp()`,
    );
    const error = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      await app.close();
      apps.splice(apps.indexOf(app), 1);
    } finally {
      await database.db.query(
        `DROP TRIGGER refuse_stamp ON cyclium_episodes; DROP FUNCTION refuse_stamp()`,
      );
    }
    expect(error.mock.calls.map((c) => String(c[0]))).toContainEqual(
      expect.stringContaining('stamp refused'),
    );
    expect(
      (await database.db.query(`SELECT * FROM cyclium_nodes WHERE node_identity = 'node-stubborn'`))
        .rows,
    ).toEqual([]);
    const claim = (
      await database.db.query(
        `SELECT claim_lease_until <= now() AS released FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows;
    expect(claim).toEqual([{ released: true }]);
  });

  it('a restart handed over while the node drains is stamped and released by the drain: a peer restarts it at once', async () => {
    // A long lease: the peer cannot be served by the claim lapsing within the test.
    const draining = await start('node-handing', 30);
    const peer = await start('node-taking', 30);
    const orphan = await draining.get(Episodes).create({
      actorId: 'relay',
      expectationId: 'work',
      startedAt: new Date(Date.now() - 600_000),
      ownerNode: 'node-gone',
    });
    const locker = await database.db.connect();
    let sweeping: Promise<unknown> | undefined;
    let closing: Promise<void> | undefined;
    try {
      // The sweep takes the orphan's claim, then waits on its row: it hands the restart over only
      // once the drain has begun.
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM cyclium_episodes WHERE id = $1 FOR UPDATE`, [orphan.id]);
      sweeping = draining.get(Recovery).sweep();
      await waitFor(
        'the sweep to wait on the row',
        async () => (await waiters('transactionid')) + (await waiters('tuple')) >= 1,
      );
      closing = close(draining);
      await waitFor('the drain to begin', () => !draining.get(ActorSlots).open);
      await locker.query('COMMIT');
      expect(await sweeping).toMatchObject({ restarted: 1 });
      await closing;
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
      await Promise.allSettled([sweeping, closing]);
    }
    expect(await row(orphan.id)).toMatchObject({ status: 'running', phase: 'interrupted' });
    await waitFor(
      'the peer to restart and finish it',
      async () => {
        await peer.get(Recovery).sweep();
        return (await row(orphan.id)).status === 'done';
      },
      5_000,
    );
    expect(await row(orphan.id)).toMatchObject({ owner_node: 'node-taking' });
  });

  it('the drain journals its marker before it releases the claim: a peer that takes over never collides with it', async () => {
    const draining = await start('node-leaving', 30);
    const peer = await start('node-staying', 30);
    const started = await draining.get(Episodes).trigger('relay', 'work', { hold: true });
    const id = (started as { episode: { id: string } }).episode.id;
    await waitFor(
      'the episode to be in its second step',
      async () => (await draining.get(Episodes).steps(id)).length === 1,
    );
    // The drain's marker waits on a lock the test holds, so a peer gets every chance to start before it lands.
    await database.db.query(`
      CREATE FUNCTION hold_interrupted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.name = 'interrupted' THEN PERFORM pg_advisory_xact_lock_shared(7131); END IF;
        RETURN NEW;
      END $$`);
    await database.db.query(
      `CREATE TRIGGER hold_interrupted BEFORE INSERT ON cyclium_episode_steps FOR EACH ROW EXECUTE FUNCTION hold_interrupted()`,
    );
    const holder = await database.db.connect();
    let closing: Promise<void> | undefined;
    try {
      await holder.query('SELECT pg_advisory_lock(7131)');
      closing = close(draining);
      await waitFor('the marker to wait', async () => (await waiters('advisory')) >= 1);
      const swept = await peer.get(Recovery).sweep();
      // Had the peer got in, its run has read the journal's next position by the time it is in step two.
      if (swept.restarted > 0)
        await waitFor('the peer to be in its second step', () => resumedInSecond.includes(id));
      await holder.query('SELECT pg_advisory_unlock(7131)');
      await closing;
    } finally {
      await holder.query('SELECT pg_advisory_unlock_all()').catch(() => undefined);
      holder.release();
      await closing?.catch(() => undefined);
      await database.db.query(
        `DROP TRIGGER hold_interrupted ON cyclium_episode_steps; DROP FUNCTION hold_interrupted()`,
      );
    }
    await waitFor(
      'the peer to restart it',
      async () => {
        if ((await row(id)).owner_node !== 'node-staying') await peer.get(Recovery).sweep();
        return (await row(id)).owner_node === 'node-staying';
      },
      5_000,
    );
    openResumed();
    await waitFor('the episode to end', async () => (await row(id)).status !== 'running');
    expect(await row(id)).toMatchObject({ status: 'done', owner_node: 'node-staying' });
    const journal = await peer.get(Episodes).steps(id);
    // The restart's start journals `woken` (its quiet time starts anew) before its next step.
    expect(journal.map((s) => s.name)).toEqual([
      'first',
      'interrupted',
      'resumed',
      'woken',
      'second',
    ]);
  });
});
