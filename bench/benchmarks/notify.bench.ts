import pg from 'pg';
import { countsSoFar, settleStats, since, type Counts } from '../support/counters.js';
import { printTable } from '../support/measure.js';

const LISTENER_COUNTS = [3, 12];
const NOTIFIES = 100;

/**
 * What one NOTIFY costs the server, in commits: K connections LISTEN on one channel while another
 * connection NOTIFYs, on that channel, on a channel nobody listens to, or with no listener at all.
 * Each listening backend reads the notification queue in a transaction of its own, and on
 * PostgreSQL up to 18 every listening backend of the database is signalled whatever the channel
 * (the per-channel listener map is PostgreSQL 19's), so a NOTIFY costs 1 + K commits wherever it
 * goes. This is the floor under the bus's cost per event as a cluster grows: K is the number of
 * nodes (of every stack and env) that listen in the database.
 */
export async function notifyBench(url: string): Promise<void> {
  const rows = [];
  for (const listeners of LISTENER_COUNTS) {
    for (const [where, listenOn, notifyOn] of [
      ['the channel they listen on', 'bench_a', 'bench_a'],
      ['another channel', 'bench_a', 'bench_b'],
      ['no listener in the database', null, 'bench_b'],
    ] as const) {
      const clients: pg.Client[] = [];
      const notifier = new pg.Client({ connectionString: url });
      notifier.on('error', () => undefined);
      await notifier.connect();
      let before: Counts;
      try {
        if (listenOn !== null)
          for (let i = 0; i < listeners; i++) {
            const client = new pg.Client({ connectionString: url });
            client.on('error', () => undefined);
            await client.connect();
            clients.push(client);
            await client.query(`LISTEN ${listenOn}`);
          }
        await settleStats();
        before = await countsSoFar(url);
        for (let i = 0; i < NOTIFIES; i++) {
          await notifier.query(`SELECT pg_notify($1, '')`, [notifyOn]);
          // Spaced, so each NOTIFY is read on its own rather than several in one listener turn.
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      } finally {
        // A backend reports its commits when it exits: closed, the listeners are all counted.
        await Promise.all([...clients, notifier].map((client) => client.end()));
      }
      await settleStats();
      const counts = since(before, await countsSoFar(url));
      rows.push({
        listeners: listenOn === null ? 0 : listeners,
        'NOTIFY on': where,
        'commits per NOTIFY': (counts.commits / NOTIFIES).toFixed(2),
      });
    }
  }
  printTable(
    `notify: ${NOTIFIES} NOTIFYs from one connection while K connections LISTEN (commits from pg_stat_database, the listeners' transactions included)`,
    rows,
  );
}
