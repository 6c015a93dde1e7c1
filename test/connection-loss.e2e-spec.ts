import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Bus,
  CycliumStatus,
  Episodes,
  Expectation,
  type BusEvent,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let release: (() => void) | undefined;
const held = () => new Promise<void>((resolve) => (release = resolve));

@Injectable()
@Actor({ id: 'holder' })
class HolderActor {
  @Expectation({ id: 'hold', trigger: 'manual' })
  async hold(ep: EpisodeContext<{ wait: boolean }>): Promise<void> {
    await ep.step('first', () => 1);
    if (ep.trigger.payload.wait) await held();
    await ep.step('second', () => 2);
  }
}

/**
 * Every connection the library owns is cut at once (the host pool's idle and checked-out clients,
 * the renewal pool, the bus's LISTEN client), as a database restart or a proxy failover would.
 * The fault guard fails this file if any of them raised an 'error' nobody listened to.
 */
describe('every connection the library owns is terminated under a running node', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'cut-node', workClaims: 'postgres', workClaimsLeaseSeconds: 30 },
      providers: [HolderActor],
    });
  });

  afterAll(async () => {
    release?.();
    await app?.close();
  });

  const terminateAll = async () =>
    (
      await database.db.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      )
    ).rows[0]?.n ?? 0;

  it('keeps the process alive, discards the broken clients, and goes on working', async () => {
    const episodes = app.get(Episodes);
    const status = app.get(CycliumStatus);
    const sql = app.get(CycliumDataSource);

    // An episode holding its claim (so the renewer has a connection), and a transaction holding a checked-out client.
    const started = await episodes.trigger('holder', 'hold', { wait: true });
    expect(started.status).toBe('started');
    await waitFor('the episode to hold its claim', () => status.snapshot().liveClaims === 1);
    let inside: (() => void) | undefined;
    const gate = new Promise<void>((resolve) => (inside = resolve));
    let proceed: (() => void) | undefined;
    const transaction = sql.transaction(async (client) => {
      await client.query('SELECT 1');
      inside?.();
      await new Promise<void>((resolve) => (proceed = resolve));
      await client.query('SELECT 2');
    });
    await gate;
    await app.get(CycliumStatus).health({ cacheMs: 0 }); // one more idle client in the host pool

    expect(await terminateAll()).toBeGreaterThanOrEqual(3);
    await waitFor(
      'the bus to notice its LISTEN connection is gone',
      () => status.snapshot().bus?.listening === false,
      5_000,
      5,
    );

    // The transaction's client broke under it: its next statement fails, the transaction rejects.
    proceed?.();
    await expect(transaction).rejects.toThrow();

    await waitFor(
      'the bus to listen again',
      () => status.snapshot().bus?.listening === true,
      10_000,
    );
    // The held episode still owns its claim (the renewal connection is reopened) and finishes.
    release?.();
    const id = (started as { episode: { id: string } }).episode.id;
    await waitFor(
      'the held episode to finish',
      async () => (await episodes.get(id))?.status === 'done',
    );

    // New work runs, and the bus delivers again.
    const next = await episodes.trigger('holder', 'hold', { wait: false });
    const nextId = (next as { episode: { id: string } }).episode.id;
    await waitFor(
      'a new episode to finish',
      async () => (await episodes.get(nextId))?.status === 'done',
    );
    const seen: BusEvent[] = [];
    const off = app.get(Bus).subscribe('after.cut', (event) => void seen.push(event));
    await app.get(Bus).publish('after.cut', { ok: true });
    await waitFor('an event published after the cut', () => seen.length === 1);
    off();
    expect((await status.health({ cacheMs: 0 })).healthy).toBe(true);
  });
});
