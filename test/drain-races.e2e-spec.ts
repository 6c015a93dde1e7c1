import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { Injectable, Logger, type INestApplicationContext } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Actor, Episodes, Expectation, LocalBus, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import { LeaseRenewer } from '../libs/cyclium/src/claims/lease-renewer.service.js';
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

describe('the drain, racing what is starting and what peers write', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];

  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(apps.splice(0).map((app) => app.close().catch(() => undefined)));
  });

  const start = (id: string) =>
    startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: id, workClaims: 'postgres', workClaimsLeaseSeconds: 6, bus: new LocalBus(), episodeShutdownMs: 300 },
      providers: [BurstActor],
    }).then((app) => (apps.push(app), app));

  it('a shutdown during a burst of triggers stamps every episode begun on the node, and reports no renew_failed', async () => {
    const app = await start('node-burst');
    let renewFailed = 0;
    const offFailed = onCyclium('work_claims.renew_failed', () => renewFailed++);
    // A renewal right after the drain released the claims: it must not report them as lost.
    let tickedAfterDrain: Promise<void> | undefined;
    const offDrained = onCyclium('drain.completed', () => (tickedAfterDrain = app.get(LeaseRenewer).tick()));
    try {
      const triggers = Array.from({ length: 60 }, (_, i) => app.get(Episodes).trigger('burst', 'work', { i }).catch(() => 'error'));
      await waitFor('the burst to be under way', async () =>
        (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_episodes WHERE actor_id = 'burst'`)).rows[0].n >= 5,
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
    const unstamped = rows.filter((r) => r.status === 'running' && (r.phase !== 'interrupted' || r.markers !== 1));
    expect(unstamped).toEqual([]);
    expect(rows.every((r) => r.status === 'running')).toBe(true); // none finished: each was mid-step
  });

  it('a marker that meets a position a peer just took is written at the next one: the journal never collides', async () => {
    const app = await start('node-marks');
    const journal = app.get(EpisodeJournal);
    const episode = await app.get(Episodes).create({ actorId: 'burst', expectationId: 'work', payload: { i: 0 } });
    const peer = await database.db.connect();
    try {
      await peer.query('BEGIN');
      expect(await journal.mark([episode.id], 'resumed', { node: 'peer' }, peer)).toEqual([episode.id]);
      // Ours reads the same free position, then waits on the peer's uncommitted row at it.
      const ours = journal.mark([episode.id], 'interrupted', { node: 'node-marks' });
      await waitFor('our insert to wait on the peer', async () =>
        (await database.db.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rows[0].n >= 1,
      );
      await peer.query('COMMIT');
      expect(await ours).toEqual([episode.id]);
    } finally {
      peer.release();
    }
    const steps = await app.get(Episodes).steps(episode.id);
    expect(steps.map((s) => [s.stepNo, s.name])).toEqual([[1, 'resumed'], [2, 'interrupted']]);
  });

  it('one failing drain statement does not skip the rest of the shutdown: the node still gives its claims up and deregisters', async () => {
    const app = await start('node-stubborn');
    const started = await app.get(Episodes).trigger('burst', 'work', { i: 1 });
    const id = (started as { episode: { id: string } }).episode.id;
    await waitFor('the episode to be mid-step', async () => (await app.get(Episodes).steps(id)).length === 1);
    await database.db.query(`
      CREATE FUNCTION refuse_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.phase = 'interrupted' THEN RAISE EXCEPTION 'stamp refused'; END IF;
        RETURN NEW;
      END $$`);
    await database.db.query(`CREATE TRIGGER refuse_stamp BEFORE UPDATE ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION refuse_stamp()`);
    const error = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      await app.close();
      apps.splice(apps.indexOf(app), 1);
    } finally {
      await database.db.query(`DROP TRIGGER refuse_stamp ON cyclium_episodes; DROP FUNCTION refuse_stamp()`);
    }
    expect(error.mock.calls.map((c) => String(c[0]))).toContainEqual(expect.stringContaining('stamp refused'));
    expect((await database.db.query(`SELECT * FROM cyclium_nodes WHERE node_identity = 'node-stubborn'`)).rows).toEqual([]);
    const claim = (
      await database.db.query(`SELECT lease_until <= now() AS released FROM cyclium_work_claims WHERE dedupe_key = $1`, [`episode:${id}`])
    ).rows;
    expect(claim).toEqual([{ released: true }]);
  });
});
