/**
 * A run's last step is journaled by its end, in the end's own statement: a 1-step episode is two
 * commits (begin; step + end), as a job of graphile-worker's is. Everything a step write told the
 * run still holds: a cancel asked during that step still ends it canceled (the step journaled),
 * a method that fails after it journals it first (a retry replays it), a sleep journals its wake-up
 * before the run stops, and with claims off the episode row proves ownership as before.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { EpisodeRunner } from '../libs/cyclium/src/episodes/episode-runner.service.js';
import { EpisodeRecoveryStore } from '../libs/cyclium/src/episodes/episode-recovery-store.js';
import { EpisodeJournal } from '../libs/cyclium/src/episodes/episode-journal.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const runs = new Map<string, number>();
const count = (key: string) => runs.set(key, (runs.get(key) ?? 0) + 1).get(key) as number;
let entered: (() => void) | undefined;
let release: (() => void) | undefined;

@Injectable()
@Actor({ id: 'last', maxConcurrentEpisodes: 16 })
class LastStepActor {
  @Expectation({ id: 'one', trigger: 'manual' })
  async one(ep: EpisodeContext<{ i: number }>): Promise<{ summary: string }> {
    const v = await ep.step('only', () => ({ i: ep.trigger.payload.i }));
    return { summary: `got ${v.i}` };
  }

  @Expectation({ id: 'held', trigger: 'manual' })
  async held(ep: EpisodeContext): Promise<void> {
    await ep.step('first', () => 1);
    await ep.step('blocking', async () => {
      entered?.();
      await new Promise<void>((resolve) => (release = resolve));
      return 2;
    });
  }

  @Expectation({
    id: 'fails-after',
    trigger: 'manual',
    retry: { attempts: 2, backoff: { initialMs: 50 } },
  })
  async failsAfter(ep: EpisodeContext): Promise<void> {
    await ep.step('counted', () => count(`${ep.episode.id}:counted`));
    if (count(`${ep.episode.id}:run`) === 1) throw new Error('after the step');
  }

  @Expectation({ id: 'naps', trigger: 'manual' })
  async naps(ep: EpisodeContext): Promise<void> {
    await ep.step('before', () => count(`${ep.episode.id}:before`));
    await ep.sleep('nap', 300);
  }
}

describe('the last step rides in the end', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  let open: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'last-node', workClaims: 'postgres', triggerPollIntervalMs: 100 },
      providers: [LastStepActor],
      poolSize: 10,
    });
    // Claims off, in an env of its own: the episode row proves ownership.
    open = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'open-node', env: 'open', workClaims: false },
      providers: [LastStepActor],
    });
  });

  afterAll(async () => {
    await app?.close();
    await open?.close();
  });

  const finished = (id: string) =>
    waitFor(`episode ${id} finished`, async () => {
      const { rows } = await database.db.query(
        `SELECT status FROM cyclium_episodes WHERE id = $1 AND finished_at IS NOT NULL`,
        [id],
      );
      return rows[0]?.status as string | undefined;
    });

  /** Each episode's journal row of `step` and whether it committed with the episode's end. */
  const journaled = async (ids: string[], step: string) =>
    (
      await database.db.query(
        `SELECT e.status, s.result_ref, s.xmin = e.xmin AS with_end,
                (SELECT count(*)::int FROM cyclium_episode_checkpoints c
                  WHERE c.episode_id = e.id) AS checkpoints
           FROM cyclium_episodes e JOIN cyclium_episode_steps s ON s.episode_id = e.id
          WHERE e.id = ANY($1::uuid[]) AND s.name = $2 ORDER BY e.inserted_at`,
        [ids, step],
      )
    ).rows as Array<{
      status: string;
      result_ref: unknown;
      with_end: boolean;
      checkpoints: number;
    }>;

  const trigger = async (node: INestApplicationContext, expectation: string, payload = {}) => {
    const started = await node.get(Episodes).trigger('last', expectation, payload);
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    return started.episode.id;
  };

  it('commits a 1-step episode in two transactions, one at a time and many at once', async () => {
    const alone: string[] = [];
    for (let i = 0; i < 3; i++) {
      alone.push(await trigger(app, 'one', { i }));
      await finished(alone[i] as string);
    }
    // At once: the ends leave in batches (EndWrites), each row carrying its step.
    const many = await Promise.all(
      Array.from({ length: 12 }, (_, i) => trigger(app, 'one', { i })),
    );
    for (const id of many) await finished(id);
    const rows = await journaled([...alone, ...many], 'only');
    expect(rows).toHaveLength(15);
    for (const row of rows) {
      expect(row).toMatchObject({ status: 'done', with_end: true, checkpoints: 0 });
      expect(row.result_ref).toEqual(expect.objectContaining({}));
    }
    const { rows: summaries } = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE id = ANY($1::uuid[])
          AND summary LIKE 'got %'`,
      [many],
    );
    expect(summaries[0].n).toBe(12);
  });

  it('journals the last step with the end when claims are off', async () => {
    const id = await trigger(open, 'one', { i: 7 });
    expect(await finished(id)).toBe('done');
    expect(await journaled([id], 'only')).toEqual([
      expect.objectContaining({ status: 'done', with_end: true }),
    ]);
  });

  it('ends canceled, the step journaled, when a cancel was asked during the last step', async () => {
    const inStep = new Promise<void>((resolve) => (entered = resolve));
    const id = await trigger(app, 'held');
    await inStep;
    // Asked in the row only, as a node that is away would leave it: no message stops the run.
    await database.db.query(
      `UPDATE cyclium_episodes SET cancel_requested_at = now() WHERE id = $1`,
      [id],
    );
    release?.();
    expect(await finished(id)).toBe('canceled');
    const rows = await journaled([id], 'blocking');
    expect(rows).toEqual([expect.objectContaining({ status: 'canceled', with_end: false })]);
  });

  it('writes nothing once a drain stamped the run during its last step, on either path', async () => {
    for (const node of [app, open]) {
      const inStep = new Promise<void>((resolve) => (entered = resolve));
      const id = await trigger(node, 'held');
      await inStep;
      // The drain's order: marked in memory, stamped, its marker at the next journal position.
      node.get(EpisodeRunner).markInterrupted([id]);
      expect(await node.get(EpisodeRecoveryStore).stampInterrupted([id])).toEqual([id]);
      await node.get(EpisodeJournal).mark([id], 'interrupted', { node: 'drain' });
      release?.();
      await waitFor(
        'the run gone from the node',
        () => node.get(EpisodeRunner).inFlight().length === 0,
      );
      const { rows } = await database.db.query(
        `SELECT e.status, e.phase, array_agg(s.name ORDER BY s.step_no) AS journal
           FROM cyclium_episodes e JOIN cyclium_episode_steps s ON s.episode_id = e.id
          WHERE e.id = $1 GROUP BY e.status, e.phase`,
        [id],
      );
      // Left to a peer's restart: the step that finished after the stamp is not journaled.
      expect(rows).toEqual([
        { status: 'running', phase: 'interrupted', journal: ['first', 'interrupted'] },
      ]);
      await database.db.query(`UPDATE cyclium_episodes SET status = 'canceled' WHERE id = $1`, [
        id,
      ]);
    }
  });

  it('journals a step the method finished before it failed: the retry replays it', async () => {
    const id = await trigger(app, 'fails-after');
    expect(await finished(id)).toBe('done');
    expect(runs.get(`${id}:counted`)).toBe(1);
    expect(runs.get(`${id}:run`)).toBe(2);
  });

  it('journals the wake-up before the run sleeps, and replays the step before it', async () => {
    const id = await trigger(app, 'naps');
    expect(await finished(id)).toBe('done');
    expect(runs.get(`${id}:before`)).toBe(1);
  });
});
