import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const DEFAULT_DELAY_MS = 1_500;

@Injectable()
@Actor({ id: 'later' })
class LaterActor {
  @Expectation({ id: 'job', trigger: 'manual', delayMs: DEFAULT_DELAY_MS })
  async job(ep: EpisodeContext<{ n: number }>): Promise<void> {
    await ep.step('work', () => ep.trigger.payload.n);
  }
}

/** An expectation's `delayMs` delays each of its triggers unless the trigger says otherwise. */
describe("an expectation's default delay", () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'later-node', triggerPollIntervalMs: 60_000 },
      providers: [LaterActor],
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  async function startedAfterMs(id: string): Promise<number | undefined> {
    const { rows } = await database.db.query<{ ms: number | null }>(
      `SELECT (extract(epoch FROM started_at - queued_at) * 1000)::float8 AS ms FROM cyclium_episodes WHERE id = $1 AND status = 'done'`,
      [id],
    );
    return rows[0]?.ms ?? undefined;
  }

  it('defers a trigger by the default, and its own node starts it when due although the next poll is a minute away', async () => {
    const result = await app.get(Episodes).trigger('later', 'job', { n: 1 });
    expect(result.status).toBe('deferred');
    if (result.status !== 'deferred') return;
    expect(result.notBefore).toBeInstanceOf(Date);
    const ms = await waitFor(
      'the delayed episode to end',
      () => startedAfterMs(result.episode.id),
      15_000,
    );
    expect(ms).toBeGreaterThanOrEqual(DEFAULT_DELAY_MS);
    expect(ms).toBeLessThan(DEFAULT_DELAY_MS + 5_000);
  });

  it('runs at once when the trigger asks for delayMs 0', async () => {
    const result = await app.get(Episodes).trigger('later', 'job', { n: 2 }, { delayMs: 0 });
    expect(result.status).toBe('started');
  });
});
