/**
 * Every NOTIFY costs each listening connection a transaction, so a node that is the only one on its
 * channel wakes its own reader in-process and sends none. A node that starts listening announces
 * itself on the channel, so the lone node NOTIFYs again at once rather than at its next beat. A
 * wake-up names the types of the events behind it, so a node where no handler wants any of them
 * does not read (a read it does not need would cost it a statement too); what it skips is read
 * with its next read.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Bus } from '@cyclium/nestjs';
import { CYCLIUM_BUS_TRANSPORT } from '../libs/cyclium/src/cyclium.constants.js';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Only a NOTIFY or the announcement can explain a delivery within the test's deadlines. */
const SLOW = { busPollIntervalMs: 120_000, nodeBeatIntervalMs: 120_000 };

/** Counts the reads of the events table `app` makes (each goes through its pool's executor). */
function countReads(app: INestApplicationContext): { count: number } {
  const counter = { count: 0 };
  const sql = app.get(CycliumDataSource).sql;
  const query = sql.query.bind(sql) as (...args: unknown[]) => Promise<never>;
  (sql as { query: unknown }).query = (...args: unknown[]) => {
    const name = (args[0] as { name?: string }).name ?? '';
    if (name.startsWith('cyclium_events_read')) counter.count++;
    return query(...args);
  };
  return counter;
}

/** An observer on the channel that is not a node: it sees every NOTIFY, in order. */
async function observeChannel(url: string): Promise<{ client: pg.Client; heard: string[] }> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  const heard: string[] = [];
  client.on('notification', (n) => heard.push(n.payload ?? ''));
  await client.query('LISTEN cyclium_bus');
  return { client, heard };
}

describe('bus wake-ups', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];
  let raw: pg.Client | undefined;

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await raw?.end().catch(() => undefined);
    raw = undefined;
  });

  it('alone on its channel, a node does not read its own events back when no handler there wants them, and delivers them with the next read', async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'lone-quiet', ...SLOW },
    });
    apps.push(app);
    const bus = app.get(Bus);
    const reads = countReads(app);
    const wanted: number[] = [];
    bus.subscribe<{ n: number }>('lone.wanted', (event) => void wanted.push(event.payload.n));
    await bus.publish('lone.wanted', { n: 1 });
    await waitFor('lone-quiet to hear its first wanted event', () => wanted.length === 1, 5_000);

    reads.count = 0;
    for (let n = 1; n <= 5; n++) await bus.publish('lone.unwanted', { n });
    const late: number[] = [];
    bus.subscribe<{ n: number }>('lone.unwanted', (event) => void late.push(event.payload.n));
    await bus.publish('lone.wanted', { n: 2 });
    await waitFor('lone-quiet to hear its second wanted event', () => wanted.length === 2, 5_000);

    // One read, for the wanted event; the five nobody wanted rode along with it.
    expect(reads.count).toBe(1);
    expect(late).toEqual([1, 2, 3, 4, 5]);
  });

  it('alone, a node delivers to itself without a NOTIFY, and NOTIFYs as soon as a second node starts listening', async () => {
    const observer = await observeChannel(database.url);
    raw = observer.client;
    const heard = observer.heard;

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

  it('that name event types leave a node with no handler for them unread until its next read', async () => {
    const observer = await observeChannel(database.url);
    raw = observer.client;
    const heard = observer.heard;

    const a = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'typed-a', ...SLOW },
    });
    apps.push(a);
    const b = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'typed-b', ...SLOW },
    });
    apps.push(b);
    await waitFor('both nodes to announce themselves', () =>
      ['j:typed-a', 'j:typed-b'].every((j) => heard.includes(j)),
    );
    const reads = countReads(b);
    const wanted: number[] = [];
    b.get(Bus).subscribe<{ n: number }>(
      'typed.wanted',
      (event) => void wanted.push(event.payload.n),
    );
    // typed-a, alone until typed-b announced itself, wakes every reader for what it may have
    // committed unannounced; once typed-b has read a wanted event sent after that, its reads so
    // far are done with.
    await waitFor('typed-a to wake the channel on hearing typed-b', () => heard.includes(''));
    await a.get(Bus).publish('typed.wanted', { n: 0 });
    await waitFor('typed-b to hear the first wanted event', () => wanted.length === 1, 5_000);
    // A read asked for while one was under way runs after it: none is left once this resolves.
    await b.get<{ catchUp(): Promise<void> }>(CYCLIUM_BUS_TRANSPORT).catchUp();
    reads.count = 0;

    for (let n = 1; n <= 5; n++) await a.get(Bus).publish('typed.unwanted', { n });
    // Their NOTIFYs sent: typed-b's LISTEN connection hears them before the wanted one's.
    await a.get<{ flushPending(): Promise<void> }>(CYCLIUM_BUS_TRANSPORT).flushPending();
    expect(heard).toContain('t:["typed.unwanted"]');
    await a.get(Bus).publish('typed.wanted', { n: 1 });
    await waitFor('typed-b to hear the wanted event', () => wanted.length === 2, 5_000);
    // One read, for the wanted event: the five nobody on typed-b wanted were read with it.
    expect(reads.count).toBe(1);

    // Wanted from now on: an unwanted event of the same type reaches the new handler at once, and
    // the five are behind typed-b's cursor.
    const late: number[] = [];
    b.get(Bus).subscribe<{ n: number }>(
      'typed.unwanted',
      (event) => void late.push(event.payload.n),
    );
    await a.get(Bus).publish('typed.unwanted', { n: 6 });
    await waitFor('typed-b to hear the now wanted event', () => late.length === 1, 5_000);
    expect(late).toEqual([6]);
    expect(reads.count).toBe(2);
  });
});
