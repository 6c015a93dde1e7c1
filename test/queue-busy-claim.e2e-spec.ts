/**
 * A queued episode whose claim another node holds when a slot frees cannot start then. Nothing
 * notes the queue when that node lets the claim go, so the slots look again by themselves: the
 * episode starts once the claim is free, taken over at the next fence, without a new trigger.
 * Likewise a dequeue that meets the head of the queue as a cancel takes it: it takes the row
 * behind, rather than reading "queue empty" and leaving the rest for the next trigger.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { ActorSlots } from '../libs/cyclium/src/dispatch/actor-slots.service.js';
import { EpisodeRunner } from '../libs/cyclium/src/episodes/episode-runner.service.js';
import { QueuedBegins } from '../libs/cyclium/src/episodes/queued-begins.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let openGate: () => void = () => undefined;
const gate = new Promise<void>((resolve) => (openGate = resolve));
let openHeadRaceGate: () => void = () => undefined;
const headRaceGate = new Promise<void>((resolve) => (openHeadRaceGate = resolve));

@Injectable()
@Actor({ id: 'single', maxConcurrentEpisodes: 1 })
class SingleSlotActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ gated: boolean; headRace?: boolean }>): Promise<void> {
    if (ep.trigger.payload.gated) await gate;
    if (ep.trigger.payload.headRace) await headRaceGate;
    await ep.step('s1', () => 'ok');
  }
}

describe('a queue head that cannot be taken: its claim held elsewhere, or its cancel under way', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'queue-node', workClaims: 'postgres', bus: 'postgres' },
      providers: [SingleSlotActor],
    });
  });

  afterAll(async () => {
    openGate();
    openHeadRaceGate();
    await app?.close();
  });

  const statusOf = async (id: string): Promise<string> =>
    (await database.db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id])).rows[0]
      ?.status;

  it('starts once the claim is let go, without another trigger', async () => {
    const episodes = app.get(Episodes);
    const runner = app.get(EpisodeRunner);
    const dequeue = runner.beginQueued.bind(runner);
    const answers: string[] = [];
    runner.beginQueued = async (actorId, expectations) => {
      const answer = await dequeue(actorId, expectations);
      answers.push(answer.status);
      return answer;
    };
    // Slots that free together take rows in one statement (QueuedBegins); a busy claim sends it back to one row at a time.
    const queuedBegins = app.get(QueuedBegins);
    const take = queuedBegins.take.bind(queuedBegins);
    queuedBegins.take = async (...args) => {
      const taken = await take(...args);
      answers.push(taken === 'busy' ? 'busy' : taken.length > 0 ? 'started' : 'none');
      return taken;
    };
    const first = await episodes.trigger('single', 'work', { gated: true });
    const second = await episodes.trigger(
      'single',
      'work',
      { gated: false },
      { dedupeKey: 'held-elsewhere' },
    );
    expect([first.status, second.status]).toEqual(['started', 'queued']);
    const firstId = 'episode' in first ? first.episode.id : '';
    const secondId = 'episode' in second ? second.episode.id : '';
    const { rows } = await database.db.query(
      `SELECT dedupe_key FROM cyclium_episodes WHERE id = $1`,
      [secondId],
    );
    const key = rows[0].dedupe_key as string;
    // Another node holds a live claim on that key (a holder finishing work under it, say).
    await database.db.query(
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, attempt, fence)
       VALUES ($1, 'claimed', 'elsewhere', now() + interval '1 hour', now(), now(), 1, 7)`,
      [key],
    );

    openGate();
    await waitFor('the first episode to finish', async () => (await statusOf(firstId)) === 'done');
    // The slot freed while the claim was held: the dequeue met it busy, and the episode waits.
    await waitFor('the dequeue to meet the held claim', () => answers.includes('busy'));
    expect(await statusOf(secondId)).toBe('queued');

    // The other node finishes: nothing here hears of it.
    await database.db.query(
      `UPDATE cyclium_work_claims SET state = 'done', finished_at = now() WHERE dedupe_key = $1`,
      [key],
    );

    await waitFor(
      'the queued episode to run',
      async () => (await statusOf(secondId)) === 'done',
      10_000,
    );
    const claim = await database.db.query(
      `SELECT state, owner_node, fence::int FROM cyclium_work_claims WHERE dedupe_key = $1`,
      [key],
    );
    expect(claim.rows[0]).toEqual({ state: 'done', owner_node: 'queue-node', fence: 8 });
    expect(answers[0]).toBe('busy');
    expect(answers).toContain('started');
  });

  it('a dequeue that races a cancel of the queue head takes the row behind it', async () => {
    const episodes = app.get(Episodes);
    const idOf = (result: Awaited<ReturnType<Episodes['trigger']>>) =>
      'episode' in result ? result.episode.id : '';
    // The last run's row is done a moment before its slot is given back.
    await waitFor('the slot to be free', () => app.get(ActorSlots).free('single') === 1);
    const running = await episodes.trigger('single', 'work', { gated: false, headRace: true });
    const head = await episodes.trigger(
      'single',
      'work',
      { gated: false },
      { dedupeKey: 'race-head' },
    );
    const behind = await episodes.trigger(
      'single',
      'work',
      { gated: false },
      { dedupeKey: 'race-behind' },
    );
    expect([running.status, head.status, behind.status]).toEqual(['started', 'queued', 'queued']);

    const canceler = await database.db.connect();
    try {
      // The cancel of the head is under way: its row changed, not yet committed.
      await canceler.query('BEGIN');
      await canceler.query(
        `UPDATE cyclium_episodes SET status = 'canceled', finished_at = now(), error_class = 'canceled' WHERE id = $1 AND status = 'queued'`,
        [idOf(head)],
      );
      openHeadRaceGate(); // the slot frees: the dequeue meets the head mid-cancel
      await waitFor(
        'the dequeue to wait on the head',
        async () =>
          (
            await database.db.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
            )
          ).rows[0].n >= 1,
      );
      await canceler.query('COMMIT');
    } finally {
      canceler.release();
    }
    // No other trigger comes: only the dequeue that raced can start the row behind.
    await waitFor(
      'the row behind the head to run',
      async () => (await statusOf(idOf(behind))) === 'done',
      5_000,
    );
    expect(await statusOf(idOf(head))).toBe('canceled');
  });
});
