/**
 * Where the lifecycle readers' declarations meet other mechanisms (rule 14): the node modes (a
 * trigger-only and a disabled node declare and hear as a full one does), the beat (a handler that
 * left stops counting at the next one), drain (a node going away reads every type until its row
 * is gone, whatever it declared), a node cut off from the database (its handler still counts for
 * minutes after its last beat, and hears the ends of meanwhile once it is back), and the bus's
 * wake-ups (an event an end did not write wakes no node).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Actor, Bus, Episodes, Expectation } from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import {
  declaredReads,
  EndingWorker,
  episodeEvents,
  runToEnd,
} from './support/lifecycle-readers.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

let openGate: (() => void) | undefined;
const gate = new Promise<void>((resolve) => (openGate = resolve));
let holding = false;

/** Holds its node's drain open: it ignores the abort until the test opens the gate. */
@Injectable()
@Actor({ id: 'meet_holder' })
class Holder {
  @Expectation({ id: 'hold', trigger: 'manual' })
  async hold(): Promise<{ summary: string }> {
    holding = true;
    await gate;
    return { summary: 'held' };
  }
}

const NODE = { workClaims: 'postgres' as const, recovery: { onBoot: false } };

describe('lifecycle readers where they meet modes, beats and drain', () => {
  const database = useDatabase(4);
  let a: INestApplicationContext;
  const apps: INestApplicationContext[] = [];

  const start = async (
    name: string,
    extra: Record<string, unknown>,
    providers: unknown[] = [],
    url = database.url,
  ) => {
    const app = await startCycliumApp({
      url,
      cyclium: { ...NODE, nodeIdentity: name, ...extra },
      providers: providers as never[],
    });
    apps.push(app);
    return app;
  };

  const close = async (app: INestApplicationContext) => {
    apps.splice(apps.indexOf(app), 1);
    await app.close();
  };

  const run = (expectation: 'ok' | 'boom', on = a) => runToEnd(on, database.db, expectation);

  const events = (id: string) => episodeEvents(database.db, id);
  const declared = (node: string) => declaredReads(database.db, node);

  beforeAll(async () => {
    a = await start('meet-a', {}, [EndingWorker]);
  });

  afterAll(async () => {
    openGate?.();
    await Promise.all(apps.map((app) => app.close()));
  });

  it('a trigger-only node and a disabled node declare what their handlers read, and hear it', async () => {
    const t = await start('meet-trigger-only', { mode: 'trigger_only' });
    const d = await start('meet-disabled', { mode: 'disabled' });
    const completed: string[] = [];
    const failed: string[] = [];
    const offs = [
      t.get(Bus).subscribe<{ episodeId: string }>('episode.completed', (event) => {
        completed.push(event.payload.episodeId);
      }),
      d.get(Bus).subscribe<{ episodeId: string }>('episode.failed', (event) => {
        failed.push(event.payload.episodeId);
      }),
    ];
    await waitFor('both declarations', async () => {
      const [onT, onD] = [await declared('meet-trigger-only'), await declared('meet-disabled')];
      return onT?.join() === 'episode.completed' && onD?.join() === 'episode.failed';
    });
    const done = await run('ok');
    const boom = await run('boom');
    expect(await events(done)).toEqual(['episode.completed']);
    expect(await events(boom)).toEqual(['episode.failed']);
    await waitFor('the trigger-only node to hear the completion', () => completed.includes(done));
    await waitFor('the disabled node to hear the failure', () => failed.includes(boom));
    offs.forEach((off) => off());
    await close(t);
    await close(d);
  });

  it('stops counting a handler that left at the next beat, and ends then write nothing', async () => {
    const b = await start('meet-beats', { nodeBeatIntervalMs: 200 });
    const off = b.get(Bus).subscribe('episode.completed', () => undefined);
    await waitFor("b's declaration", async () =>
      (await declared('meet-beats'))?.includes('episode.completed'),
    );
    expect(await events(await run('ok'))).toEqual(['episode.completed']);
    off();
    await waitFor(
      'the next beat to narrow the declaration',
      async () => (await declared('meet-beats'))?.length === 0,
    );
    expect(await events(await run('ok'))).toEqual([]);
    await close(b);
  });

  it('a draining node reads every type until its row is gone, whatever it declared', async () => {
    const h = await start('meet-draining', { episodeShutdownMs: 60_000 }, [Holder]);
    expect(await declared('meet-draining')).toEqual([]);
    expect(await events(await run('ok'))).toEqual([]);
    await h.get(Episodes).trigger('meet_holder', 'hold', {});
    await waitFor('the holder to run', () => holding);
    apps.splice(apps.indexOf(h), 1);
    const closing = h.close();
    try {
      await waitFor('the draining row to drop its boot id', async () => {
        const { rows } = await database.db.query(
          `SELECT 1 FROM cyclium_nodes WHERE node_identity = 'meet-draining' AND boot_id IS NULL`,
        );
        return rows.length === 1;
      });
      expect(await events(await run('ok'))).toEqual(['episode.completed']);
      expect(await events(await run('boom'))).toEqual(['episode.failed']);
    } finally {
      openGate?.();
      await closing;
    }
    const { rows } = await database.db.query(
      `SELECT 1 FROM cyclium_nodes WHERE node_identity = 'meet-draining'`,
    );
    expect(rows).toEqual([]);
    expect(await events(await run('ok'))).toEqual([]);
  });

  it('counts a node cut off from the database for many beats, which hears the ends once back', async () => {
    const proxy = await TcpProxy.start({ target: database.url });
    try {
      // Three beats are 0.6 s (the peers' staleness, far shorter than a database failover) on the
      // node that ends the episode, which is the one that judges.
      const ender = await start('meet-ender', { nodeBeatIntervalMs: 200 }, [EndingWorker]);
      const b = await start(
        'meet-cut-off',
        { nodeBeatIntervalMs: 200 },
        [],
        proxy.url(database.url),
      );
      const heard: string[] = [];
      b.get(Bus).subscribe<{ episodeId: string }>('episode.completed', (event) => {
        heard.push(event.payload.episodeId);
      });
      await waitFor("b's declaration", async () =>
        (await declared('meet-cut-off'))?.includes('episode.completed'),
      );
      proxy.freeze();
      await waitFor("b's row to miss ten of its beats", async () => {
        const { rows } = await database.db.query(
          `SELECT 1 FROM cyclium_nodes
            WHERE node_identity = 'meet-cut-off' AND last_seen_at < now() - interval '2 s'`,
        );
        return rows.length === 1;
      });
      const done = await run('ok', ender);
      expect(await events(done)).toEqual(['episode.completed']);
      proxy.thaw();
      await waitFor('b, back, to hear the end of meanwhile', () => heard.includes(done));
      await close(b);
      await close(ender);
    } finally {
      proxy.thaw();
      await proxy.close();
    }
  });

  it('wakes the channel for the events an end wrote, never for one it did not', async () => {
    const b = await start('meet-woken', {});
    const off = b.get(Bus).subscribe('episode.completed', () => undefined);
    await waitFor("b's declaration", async () =>
      (await declared('meet-woken'))?.includes('episode.completed'),
    );
    const listener = new pg.Client({ connectionString: database.url });
    listener.on('error', () => undefined);
    const payloads: string[] = [];
    listener.on('notification', (n) => payloads.push(n.payload ?? ''));
    await listener.connect();
    try {
      await listener.query(`LISTEN "${busChannel(null, null)}"`);
      // b listens, so a is not alone on the channel: a wake-up for a written event is a NOTIFY
      // naming its type ('t:[...]'), and one for the failure nobody reads would name that.
      const failed = await run('boom');
      const done = await run('ok');
      expect(await events(failed)).toEqual([]);
      expect(await events(done)).toEqual(['episode.completed']);
      await waitFor('the wake-up for the completion', () =>
        payloads.some((p) => p.includes('episode.completed')),
      );
      expect(payloads.filter((p) => p.includes('episode.failed'))).toEqual([]);
    } finally {
      await listener.end();
      off();
      await close(b);
    }
  });
});
