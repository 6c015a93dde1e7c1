import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  InvalidTriggerError,
  Recovery,
  type EpisodeContext,
  type TriggerOptions,
} from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const INITIAL_MS = 400;

class PermanentError extends Error {
  override readonly name = 'PermanentError';
}

/** Side effects by episode and step name, as the test process saw them. */
const ran = new Map<string, number>();
const count = (episodeId: string, step: string) =>
  ran
    .set(`${episodeId}:${step}`, (ran.get(`${episodeId}:${step}`) ?? 0) + 1)
    .get(`${episodeId}:${step}`) as number;

@Injectable()
@Actor({ id: 'flaky' })
class FlakyActor {
  @Expectation({
    id: 'job',
    trigger: 'manual',
    retry: { attempts: 3, backoff: { initialMs: INITIAL_MS, factor: 2 } },
    retryable: (error) => !(error instanceof PermanentError),
  })
  async job(ep: EpisodeContext<{ failures: number; permanent?: boolean }>): Promise<void> {
    const id = ep.episode.id;
    await ep.step('s1', () => count(id, 's1'));
    await ep.step('s2', () => count(id, 's2'));
    await ep.step('s3', () => {
      const n = count(id, 's3');
      if (ep.trigger.payload.permanent) throw new PermanentError('not worth another try');
      if (n <= ep.trigger.payload.failures) throw new Error(`s3 failed, run ${n}`);
      return n;
    });
  }
}

const NAP_MS = 800;

@Injectable()
@Actor({ id: 'sleeper' })
class SleeperActor {
  @Expectation({ id: 'nap', trigger: 'manual' })
  async nap(ep: EpisodeContext<{ catchIt?: boolean }>): Promise<void> {
    const id = ep.episode.id;
    await ep.step('before', () => count(id, 'before'));
    if (ep.trigger.payload.catchIt) {
      try {
        await ep.sleep('nap', NAP_MS);
      } catch {
        // a host's catch cannot keep the run going through its sleep
      }
    } else {
      await ep.sleep('nap', NAP_MS);
    }
    await ep.step('after', () => count(id, 'after'));
  }
}

/**
 * Retries with backoff, in process: a failed attempt waits `waiting` (no slot, invisible to the
 * sweep) with a wake-up due after the backoff, and the next attempt resumes from the journal.
 */
describe('retries with backoff', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'retry-node', triggerPollIntervalMs: 100 },
      providers: [FlakyActor, SleeperActor],
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  async function trigger(
    payload: { failures: number; permanent?: boolean },
    options?: TriggerOptions,
  ): Promise<string> {
    const result = await app.get(Episodes).trigger('flaky', 'job', payload, options);
    if (result.status !== 'started') throw new Error(`trigger was ${result.status}`);
    return result.episode.id;
  }

  async function ended(id: string): Promise<Record<string, unknown>> {
    return waitFor(`episode ${id} to end`, async () => {
      const { rows } = await database.db.query(
        `SELECT * FROM cyclium_episodes WHERE id = $1 AND finished_at IS NOT NULL`,
        [id],
      );
      return rows[0] as Record<string, unknown> | undefined;
    }) as Promise<Record<string, unknown>>;
  }

  it('ends done after three attempts when the third step throws twice; steps 1 and 2 run once; each backoff is at least its delay', async () => {
    const id = await trigger({ failures: 2 });
    const row = await ended(id);
    expect(row).toMatchObject({ status: 'done', retries: 2 });
    expect([ran.get(`${id}:s1`), ran.get(`${id}:s2`), ran.get(`${id}:s3`)]).toEqual([1, 1, 3]);
    const marks = await database.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'retry' ORDER BY step_no`,
      [id],
    );
    expect(
      marks.rows.map((r) => [r.result_ref.attempt, r.result_ref.delayMs, r.result_ref.error]),
    ).toEqual([
      // Where it threw leads: the journal holds only the steps that completed.
      [1, INITIAL_MS, 'in step 3 "s3": s3 failed, run 1'],
      [2, INITIAL_MS * 2, 'in step 3 "s3": s3 failed, run 2'],
    ]);
    // Each wake-up was taken no earlier than its backoff after the failure was written (database clock).
    const waits = await database.db.query<{ waited: number; due: number }>(
      `SELECT (extract(epoch FROM claimed_at - inserted_at) * 1000)::float8 AS waited, (extract(epoch FROM not_before - inserted_at) * 1000)::float8 AS due
         FROM cyclium_trigger_requests WHERE episode_id = $1 ORDER BY inserted_at`,
      [id],
    );
    expect(waits.rows.map((w) => Math.round(w.due))).toEqual([INITIAL_MS, INITIAL_MS * 2]);
    for (const w of waits.rows) expect(w.waited).toBeGreaterThanOrEqual(w.due);
  });

  it('fails after the last attempt with the last error and the attempt count', async () => {
    const id = await trigger({ failures: 10 });
    const row = await ended(id);
    expect(row).toMatchObject({ status: 'failed', error_class: 'crash', retries: 2 });
    expect(row.error_detail).toMatch(/^attempt 3 of 3: in step 3 "s3": s3 failed, run 3/);
    expect(ran.get(`${id}:s3`)).toBe(3);
    expect(ran.get(`${id}:s1`)).toBe(1);
  });

  it('does not retry an error retryable() turns down', async () => {
    const id = await trigger({ failures: 0, permanent: true });
    const row = await ended(id);
    expect(row).toMatchObject({ status: 'failed', retries: 0 });
    expect(ran.get(`${id}:s3`)).toBe(1);
  });

  it("goes by a trigger's own retry policy over the expectation's, and by none with retry: false", async () => {
    const own = await trigger(
      { failures: 5 },
      { retry: { attempts: 2, backoff: { initialMs: 100 } } },
    );
    const row = await ended(own);
    expect(row).toMatchObject({ status: 'failed', retries: 1 });
    expect(row.error_detail).toMatch(/^attempt 2 of 2: in step 3 "s3": s3 failed, run 2/);
    const marks = await database.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'retry'`,
      [own],
    );
    expect(marks.rows.map((r) => r.result_ref.delayMs)).toEqual([100]);

    const none = await trigger({ failures: 1 }, { retry: false });
    expect(await ended(none)).toMatchObject({
      status: 'failed',
      retries: 0,
      error_detail: expect.stringMatching(/^in step 3 "s3": s3 failed, run 1/),
    });
    expect(ran.get(`${none}:s3`)).toBe(1);

    const bad = app
      .get(Episodes)
      .trigger('flaky', 'job', { failures: 0 }, { retry: { attempts: 1 } });
    await expect(bad).rejects.toThrow(InvalidTriggerError);
    await expect(bad).rejects.toMatchObject({
      field: 'retry',
      message: expect.stringContaining('retry.attempts must be a whole number >= 2'),
    });
  });

  it('waits invisible to the orphan sweep, and a cancel while it waits ends it canceled without another attempt', async () => {
    const id = await trigger({ failures: 10 });
    await waitFor(
      'the first backoff',
      async () =>
        (
          await database.db.query(
            `SELECT 1 FROM cyclium_episodes WHERE id = $1 AND status = 'waiting'`,
            [id],
          )
        ).rowCount === 1,
    );
    const swept = await app.get(Recovery).sweep({ staleAfterMs: 1 });
    expect(swept.restarted + swept.failed).toBe(0);
    expect(await app.get(Episodes).cancel(id)).toBe('canceled');
    // Its wake-up falls due and is taken by a poll, which finds nothing to run.
    await waitFor('the wake-up to be taken', async () => {
      const { rows } = await database.db.query(
        `SELECT 1 FROM cyclium_trigger_requests WHERE episode_id = $1 AND status = 'completed'`,
        [id],
      );
      return rows.length === 1;
    });
    expect((await ended(id)).status).toBe('canceled');
    expect(ran.get(`${id}:s3`)).toBe(1);
  });

  /** A row's columns once it has settled (neither running nor waiting): how the episode ended. */
  async function settled(id: string, columns: string): Promise<Record<string, unknown>> {
    const sql = `SELECT status, ${columns} FROM cyclium_episodes WHERE id = $1`;
    const read = async () => (await database.db.query(sql, [id])).rows[0];
    return waitFor(`episode ${id} to end`, async () => {
      const row = await read();
      return row?.status === 'running' || row?.status === 'waiting' ? undefined : row;
    }).catch(async (error: unknown) => {
      throw new Error(`${String(error)}; the episode is ${JSON.stringify(await read())}`, {
        cause: error,
      });
    });
  }

  it("an operator's retry of an episode canceled as it ran, then failed, runs: the old cancel is cleared", async () => {
    const orphan = await app.get(Episodes).create({
      actorId: 'flaky',
      expectationId: 'job',
      payload: { failures: 0 },
      ownerNode: 'node-gone',
      startedAt: new Date(Date.now() - 60_000),
    });
    // Asked while it ran on a node that no longer answers; then recovery fails it (policy fail).
    expect(await app.get(Episodes).cancel(orphan.id)).toBe('requested');
    expect(await app.get(Recovery).sweep({ staleAfterMs: 1 })).toMatchObject({ failed: 1 });
    expect((await ended(orphan.id)).error_class).toBe('orphaned');
    expect(await app.get(Episodes).retry(orphan.id)).toMatchObject({ status: 'resumed' });
    const row = await settled(orphan.id, 'error_class, cancel_requested_at');
    expect(row).toEqual({ status: 'done', error_class: null, cancel_requested_at: null });
    expect([ran.get(`${orphan.id}:s1`), ran.get(`${orphan.id}:s3`)]).toEqual([1, 1]);
  });

  it('a transient fault at the wait write (backoff, sleep) is retried: waits, then done, each step once', async () => {
    // The first wake-up of each kind meets a serialization failure, as a blip would; sequences are not rolled back.
    await database.db.query(`
      CREATE SEQUENCE fault_retry; CREATE SEQUENCE fault_sleep;
      CREATE FUNCTION fault_once() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF (NEW.opts->>'wake' = 'retry' AND nextval('fault_retry') = 1)
           OR (NEW.opts->>'wake' = 'sleep' AND nextval('fault_sleep') = 1) THEN
          RAISE EXCEPTION 'could not serialize access (injected)' USING ERRCODE = '40001';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER fault_once BEFORE INSERT ON cyclium_trigger_requests FOR EACH ROW EXECUTE FUNCTION fault_once()`);
    try {
      const retried = await trigger({ failures: 1 });
      const slept = await app.get(Episodes).trigger('sleeper', 'nap', {});
      if (slept.status !== 'started') throw new Error(`trigger was ${slept.status}`);
      const wakeUps = `SELECT count(*)::int AS n FROM cyclium_trigger_requests
                        WHERE episode_id = $1 AND status = 'completed'`;
      const outcome = async (id: string) => ({
        ...(await settled(id, 'error_class, retries, attempts')),
        wakeUps: (await database.db.query(wakeUps, [id])).rows[0].n,
      });
      const done = { status: 'done', error_class: null, attempts: 0, wakeUps: 1 };
      expect(await outcome(retried)).toEqual({ ...done, retries: 1 });
      expect([
        ran.get(`${retried}:s1`),
        ran.get(`${retried}:s2`),
        ran.get(`${retried}:s3`),
      ]).toEqual([1, 1, 2]);
      const nap = slept.episode.id;
      expect(await outcome(nap)).toEqual({ ...done, retries: 0 });
      expect([ran.get(`${nap}:before`), ran.get(`${nap}:after`)]).toEqual([1, 1]);
      const faults = await database.db.query(`SELECT (SELECT last_value FROM fault_retry) AS retry,
                                                     (SELECT last_value FROM fault_sleep) AS sleep`);
      expect(faults.rows[0]).toEqual({ retry: '2', sleep: '2' });
    } finally {
      await database.db
        .query(`DROP TRIGGER fault_once ON cyclium_trigger_requests; DROP FUNCTION fault_once();
                               DROP SEQUENCE fault_retry, fault_sleep`);
    }
  });

  it.each([false, true])(
    'sleeps durably: gives up the run until its wake-up, then resumes after the sleep, each step once (caught by the host: %p)',
    async (catchIt) => {
      const result = await app.get(Episodes).trigger('sleeper', 'nap', { catchIt });
      if (result.status !== 'started') throw new Error(`trigger was ${result.status}`);
      const id = result.episode.id;
      await waitFor(
        'the sleep',
        async () =>
          (
            await database.db.query(
              `SELECT 1 FROM cyclium_episodes WHERE id = $1 AND status = 'waiting'`,
              [id],
            )
          ).rowCount === 1,
      );
      expect(ran.get(`${id}:after`)).toBeUndefined();
      const row = await ended(id);
      expect(row).toMatchObject({ status: 'done', retries: 0 });
      expect([ran.get(`${id}:before`), ran.get(`${id}:after`)]).toEqual([1, 1]);
      const { rows } = await database.db.query<{ name: string; ms: number }>(
        `SELECT name, (extract(epoch FROM created_at - (SELECT created_at FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'sleep:nap')) * 1000)::float8 AS ms
         FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'after'`,
        [id],
      );
      expect(rows[0]?.ms).toBeGreaterThanOrEqual(NAP_MS - 50); // the wake-up time is the node's clock, the journal's the database's
    },
  );
});
