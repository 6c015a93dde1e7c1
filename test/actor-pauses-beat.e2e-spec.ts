import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Actor, Expectation, Mode } from '@cyclium/nestjs';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

@Injectable()
@Actor({ id: 'beat-paused' })
class BeatPausedActor {
  @Expectation({ id: 'run', trigger: 'manual' })
  async run(): Promise<void> {}
}

/**
 * A pause written by something that announces nothing (another release, an operator's SQL, a lost
 * bus message) still reaches every node within a beat, and an idle node pays no statement of its
 * own for it: the read rides in the node beat's statement.
 */
describe('actor pauses ride in the node beat', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const texts: string[] = [];

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'beat-node', nodeBeatIntervalMs: 250 },
      providers: [BeatPausedActor],
    });
    const sql = app.get(CycliumDataSource).sql;
    const query = sql.query.bind(sql) as (...args: unknown[]) => unknown;
    jest.spyOn(sql, 'query').mockImplementation(((...args: unknown[]) => {
      const config = args[0] as string | { text: string };
      texts.push(typeof config === 'string' ? config : config.text);
      return query(...args);
    }) as typeof sql.query);
  });

  afterAll(async () => {
    await app?.close();
  });

  it('picks a silent pause and resume up at a beat, with no statement of its own', async () => {
    const mode = app.get(Mode);
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(
        `INSERT INTO cyclium_actor_pauses (actor_id, stack, env, paused_by, reason)
         VALUES ('beat-paused', NULL, NULL, 'psql', 'by hand')`,
      );
      await waitFor('paused at a beat', () => mode.isPaused('beat-paused'), 3_000);
      await client.query(`DELETE FROM cyclium_actor_pauses WHERE actor_id = 'beat-paused'`);
      await waitFor('resumed at a beat', () => !mode.isPaused('beat-paused'), 3_000);
    } finally {
      await client.end();
    }
    const beats = texts.filter((t) => t.includes('UPDATE cyclium_nodes'));
    const pauseReads = texts.filter((t) => t.includes('cyclium_actor_pauses'));
    expect(beats.length).toBeGreaterThanOrEqual(2);
    // Every read of the table was a beat's.
    expect(pauseReads.every((t) => t.includes('UPDATE cyclium_nodes'))).toBe(true);
  });
});
