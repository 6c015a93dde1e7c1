/**
 * Every NOTIFY costs each listening connection a transaction, so a node that is the only one on its
 * channel wakes its own reader in-process and sends none. A node that starts listening announces
 * itself on the channel, so the lone node NOTIFYs again at once rather than at its next beat.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { Bus } from '@cyclium/nestjs';
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

  it('delivers to itself without a NOTIFY, and NOTIFYs as soon as a second node starts listening', async () => {
    // An observer on the channel that is not a node: it sees every NOTIFY and is never counted.
    raw = new pg.Client({ connectionString: database.url });
    raw.on('error', () => undefined);
    await raw.connect();
    const heard: string[] = [];
    raw.on('notification', (n) => heard.push(n.payload ?? ''));
    await raw.query('LISTEN cyclium_bus');

    const a = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'lone-a', ...SLOW } });
    apps.push(a);
    await waitFor('lone-a to announce itself', () => heard.includes('j:lone-a'));
    const seenByA: number[] = [];
    a.get(Bus).subscribe<{ n: number }>('lone.ping', (event) => void seenByA.push(event.payload.n));
    heard.length = 0;
    for (let n = 1; n <= 20; n++) await a.get(Bus).publish('lone.ping', { n });
    await waitFor('lone-a to hear its own 20 events', () => seenByA.length === 20, 5_000);
    expect(seenByA).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(heard).toEqual([]);

    const b = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'lone-b', ...SLOW } });
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
