import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Where a run stops until the test lets it go: inside its second step, or after it, before its end. */
type Hold = 'step' | 'end';

const reached = new Set<string>();
const gates = new Map<string, () => void>();
async function holdAt(tag: string): Promise<void> {
  const released = new Promise<void>((resolve) => gates.set(tag, resolve));
  reached.add(tag);
  await released;
}

@Injectable()
@Actor({ id: 'holder' })
class HolderActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart' })
  async job(ep: EpisodeContext<{ tag: string; hold: Hold }>): Promise<void> {
    const { tag, hold } = ep.trigger.payload;
    await ep.step('first', () => tag);
    await ep.step('second', async () => {
      if (hold === 'step') await holdAt(tag);
      return tag;
    });
    if (hold === 'end') await holdAt(tag);
  }
}

/**
 * With claims off (the default) the episode row is the only proof of ownership: a run whose
 * episode a peer's sweep took meanwhile (phase `recovering`, owned by the peer, its `resumed`
 * marker journaled) writes nothing more to it — not its step, not its end — and is recorded as a
 * lost episode (`episode.aborted`), never as the host's crash.
 */
describe('claims off: a run that lost its episode to a sweep writes nothing more', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const aborted: string[] = [];
  const failed: string[] = [];
  const offs: Array<() => void> = [];

  beforeAll(async () => {
    offs.push(onCyclium('episode.aborted', (e) => aborted.push(e.episodeId)));
    offs.push(onCyclium('episode.failed', (e) => failed.push(e.episodeId)));
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lost-a', bus: 'local', recovery: { onBoot: false } },
      providers: [HolderActor],
    });
  });

  afterAll(async () => {
    for (const release of gates.values()) release();
    offs.forEach((off) => off());
    await app?.close();
  });

  /** What a peer's sweep writes when it takes the episode: the take (as TAKE) and its marker, in one transaction. */
  async function takenByPeer(id: string): Promise<void> {
    await database.db.query(
      `WITH taken AS (
         UPDATE cyclium_episodes
            SET phase = 'recovering', attempts = attempts + 1, owner_node = 'peer-b', updated_at = now()
          WHERE id = $1 AND status = 'running' RETURNING id)
       INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
       SELECT t.id, coalesce((SELECT max(s.step_no) FROM cyclium_episode_steps s WHERE s.episode_id = t.id), 0) + 1,
              'observation', 'resumed', '{"event": "resumed", "node": "peer-b"}'
         FROM taken t`,
      [id],
    );
  }

  const ROW = `SELECT status, phase, owner_node, error_class, attempts FROM cyclium_episodes WHERE id = $1`;
  const JOURNAL = `SELECT kind, name FROM cyclium_episode_steps WHERE episode_id = $1 ORDER BY step_no`;

  /** Lets the run go on after the take; what it left once it gave up (aborted) or wrote an end. */
  async function loseAt(hold: Hold) {
    const tag = `lost-at-${hold}`;
    const started = await app.get(Episodes).trigger('holder', 'job', { tag, hold });
    if (started.status !== 'started') throw new Error(`trigger was ${started.status}`);
    const id = started.episode.id;
    await waitFor(`the run to hold at its ${hold}`, () => reached.has(tag));
    await takenByPeer(id);
    gates.get(tag)?.();
    const row = async () => (await database.db.query(ROW, [id])).rows[0];
    await waitFor('the run to be recorded as lost, or to end the episode', async () => {
      return aborted.includes(id) || (await row()).status !== 'running';
    });
    const journal = (await database.db.query(JOURNAL, [id])).rows.map((r) => `${r.kind}:${r.name}`);
    return {
      aborted: aborted.includes(id),
      failed: failed.includes(id),
      row: await row(),
      journal,
    };
  }

  const lost = {
    aborted: true,
    failed: false,
    row: {
      status: 'running',
      phase: 'recovering',
      owner_node: 'peer-b',
      error_class: null,
      attempts: 1,
    },
  };

  it('a step that ends after the take writes no journal row or checkpoint, and does not end it crash', async () => {
    expect(await loseAt('step')).toEqual({
      ...lost,
      journal: ['step:first', 'observation:resumed'],
    });
    const checkpoints = await database.db.query(`
      SELECT 1 FROM cyclium_episode_checkpoints c JOIN cyclium_episodes e ON e.id = c.episode_id
       WHERE c.phase = 'second' AND e.trigger_ref->'payload'->>'tag' = 'lost-at-step'`);
    expect(checkpoints.rowCount).toBe(0);
  });

  it('an end that comes after the take writes no terminal status', async () => {
    expect(await loseAt('end')).toEqual({
      ...lost,
      journal: ['step:first', 'step:second', 'observation:resumed'],
    });
  });
});
