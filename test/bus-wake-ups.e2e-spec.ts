/**
 * Every NOTIFY costs each listening connection a transaction, so a node that is the only one on its
 * channel wakes its own reader in-process and sends none. A node that starts listening announces
 * itself on the channel, so the lone node NOTIFYs again at once rather than at its next beat.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Bus } from '@cyclium/nestjs';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Only a NOTIFY or the announcement can explain a delivery within the test's deadlines. */
const SLOW = { busPollIntervalMs: 120_000, nodeBeatIntervalMs: 120_000 };

describe('a node alone on its bus channel', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];
  let raw: pg.Client | undefined;

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await raw?.end().catch(() => undefined);
    raw = undefined;
  });

  it('does not read its own events back when no handler here wants them, and delivers them with the next read', async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lone-quiet', ...SLOW },
    });
    apps.push(app);
    const bus = app.get(Bus);
    // Every read of the events table this node makes goes through the pool's executor.
    const sql = app.get(CycliumDataSource).sql;
    const query = sql.query.bind(sql) as (...args: unknown[]) => Promise<never>;
    let reads = 0;
    (sql as { query: unknown }).query = (...args: unknown[]) => {
      const name = (args[0] as { name?: string }).name ?? '';
      if (name.startsWith('cyclium_events_read')) reads++;
      return query(...args);
    };
    const wanted: number[] = [];
    bus.subscribe<{ n: number }>('lone.wanted', (event) => void wanted.push(event.payload.n));
    await bus.publish('lone.wanted', { n: 1 });
    await waitFor('lone-quiet to hear its first wanted event', () => wanted.length === 1, 5_000);

    reads = 0;
    for (let n = 1; n <= 5; n++) await bus.publish('lone.unwanted', { n });
    const late: number[] = [];
    bus.subscribe<{ n: number }>('lone.unwanted', (event) => void late.push(event.payload.n));
    await bus.publish('lone.wanted', { n: 2 });
    await waitFor('lone-quiet to hear its second wanted event', () => wanted.length === 2, 5_000);

    // One read, for the wanted event; the five nobody wanted rode along with it.
    expect(reads).toBe(1);
    expect(late).toEqual([1, 2, 3, 4, 5]);
  });

  it('delivers to itself without a NOTIFY, and NOTIFYs as soon as a second node starts listening', async () => {
    // An observer on the channel that is not a node: it sees every NOTIFY and is never counted.
    raw = new pg.Client({ connectionString: database.url });
    raw.on('error', () => undefined);
    await raw.connect();
    const heard: string[] = [];
    raw.on('notification', (n) => heard.push(n.payload ?? ''));
    await raw.query('LISTEN cyclium_bus');

    const a = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lone-a', ...SLOW },
    });
    apps.push(a);
    await waitFor('lone-a to announce itself', () => heard.includes('j:lone-a'));
    const seenByA: number[] = [];
    a.get(Bus).subscribe<{ n: number }>('lone.ping', (event) => void seenByA.push(event.payload.n));
    heard.length = 0;
    for (let n = 1; n <= 20; n++) await a.get(Bus).publish('lone.ping', { n });
    await waitFor('lone-a to hear its own 20 events', () => seenByA.length === 20, 5_000);
    expect(seenByA).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(heard).toEqual([]);

    const b = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lone-b', ...SLOW },
    });
    apps.push(b);
    const seenByB: number[] = [];
    b.get(Bus).subscribe<{ n: number }>('lone.ping', (event) => void seenByB.push(event.payload.n));
    await waitFor('lone-b to announce itself', () => heard.includes('j:lone-b'));
    // lone-a's next look at the node table is two minutes away: only the announcement makes it NOTIFY.
    await a.get(Bus).publish('lone.ping', { n: 21 });
    await waitFor('lone-b to hear lone-a at once', () => seenByB.includes(21), 5_000);
    expect(heard.filter((payload) => !payload.startsWith('j:')).length).toBeGreaterThan(0);
    await waitFor('lone-a to hear it too', () => seenByA.includes(21), 5_000);
  });
});
