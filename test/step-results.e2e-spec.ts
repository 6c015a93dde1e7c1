import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  InvalidTriggerError,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { EpisodeJournal } from '../libs/cyclium/src/episodes/episode-journal.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** What jsonb refuses: a NUL, and a lone surrogate (JSON.stringify writes both as escapes). */
const AWKWARD = { text: 'before\u0000after', lone: '\ud800', nested: ['\u0000', { k: 'x\u0000' }] };

let release: (() => void) | undefined;
const sideEffects: string[] = [];

@Injectable()
@Actor({ id: 'awkward' })
class AwkwardActor {
  @Expectation({ id: 'returns', trigger: 'manual' })
  async returns(ep: EpisodeContext<{ hold?: boolean }>): Promise<void> {
    await ep.step('awkward', () => {
      sideEffects.push('awkward');
      return AWKWARD;
    });
    if (ep.trigger.payload.hold) await new Promise<void>((resolve) => (release = resolve));
  }

  @Expectation({ id: 'cyclic', trigger: 'manual' })
  async cyclic(ep: EpisodeContext): Promise<void> {
    await ep.step('loop', () => {
      const value: Record<string, unknown> = {};
      value.self = value;
      return value;
    });
  }
}

/**
 * A step's side effect has happened by the time its result is stored, so a result jsonb refuses
 * must be stored another way, not fail the episode as a crash; input a trigger cannot store is
 * refused before anything is written.
 */
describe('step results and trigger input that PostgreSQL cannot store as they are', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'awkward-node' },
      providers: [AwkwardActor],
    });
  });

  afterAll(async () => {
    release?.();
    await app?.close();
  });

  const status = async (id: string) =>
    (
      await database.db.query(`SELECT status, error_class FROM cyclium_episodes WHERE id = $1`, [
        id,
      ])
    ).rows[0];

  it('stores a result holding NUL characters and lone surrogates losslessly: checkpoint, journal, and the episode ends done', async () => {
    const episodes = app.get(Episodes);
    const held = await episodes.trigger('awkward', 'returns', { hold: true });
    if (held.status !== 'started') throw new Error(`not started: ${held.status}`);
    const id = held.episode.id;
    await waitFor(
      'the step to be checkpointed',
      async () => (await app.get(EpisodeJournal).checkpoints(id)).size === 1,
    );
    // What a resumed run would be handed back.
    expect((await app.get(EpisodeJournal).checkpoints(id)).get(1)).toEqual({
      name: 'awkward',
      state: AWKWARD,
    });
    release?.();
    await waitFor('the episode to end', async () => (await status(id))?.status !== 'running');
    expect(await status(id)).toEqual({ status: 'done', error_class: null });
    const [step] = await episodes.steps(id);
    expect(step).toMatchObject({ name: 'awkward', resultRef: { v: AWKWARD } });
    expect(sideEffects).toEqual(['awkward']);
  });

  it('fails a step whose result is not JSON with StepResultError naming the step, not as a crash', async () => {
    const started = await app.get(Episodes).trigger('awkward', 'cyclic', {});
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    await waitFor(
      'the episode to end',
      async () => (await status(started.episode.id))?.status !== 'running',
    );
    const row = (
      await database.db.query(
        `SELECT status, error_class, error_detail FROM cyclium_episodes WHERE id = $1`,
        [started.episode.id],
      )
    ).rows[0];
    expect(row).toMatchObject({ status: 'failed', error_class: 'step_result' });
    expect(row.error_detail).toMatch(
      /step "loop" returned a result that cannot be serialised as JSON/,
    );
  });

  it('refuses a NUL in a payload or dedupe key, and a dedupe key past the index limit, before writing', async () => {
    const episodes = app.get(Episodes);
    const before = (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_episodes`))
      .rows[0].n;
    const refusal = (promise: Promise<unknown>) =>
      promise.then(
        () => null,
        (error: unknown) => error,
      );
    const cases = [
      [episodes.trigger('awkward', 'returns', { note: '\u0000' }), 'payload'],
      [episodes.trigger('awkward', 'returns', {}, { dedupeKey: 'a\u0000' }), 'dedupeKey'],
      [episodes.trigger('awkward', 'returns', {}, { dedupeKey: '€'.repeat(400) }), 'dedupeKey'],
      [
        episodes.create({ actorId: 'awkward', expectationId: 'returns', payload: { n: 1n } }),
        'payload',
      ],
    ] as const;
    for (const [call, field] of cases) {
      const error = await refusal(call);
      expect(error).toBeInstanceOf(InvalidTriggerError);
      expect((error as InvalidTriggerError).field).toBe(field);
    }
    expect(
      (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_episodes`)).rows[0].n,
    ).toBe(before);
    // 1,000 bytes is still a key.
    expect(
      (await episodes.trigger('awkward', 'returns', {}, { dedupeKey: 'k'.repeat(1_000) })).status,
    ).toBe('started');
  });
});
