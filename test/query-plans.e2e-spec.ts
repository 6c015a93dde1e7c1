import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { EventLog } from '../libs/cyclium/src/bus/event-log.js';
import type { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import type { CanceledRequests } from '../libs/cyclium/src/episodes/canceled-requests.interface.js';
import { EpisodeQueue } from '../libs/cyclium/src/episodes/episode-queue.js';
import { CANDIDATES, NOT_HOSTED } from '../libs/cyclium/src/episodes/episode-recovery-store.js';
import { OutputStore, TAKE_DUE } from '../libs/cyclium/src/outputs/output-store.js';
import { pendingStatement } from '../libs/cyclium/src/dispatch/due-requests.js';
import { freshDatabase } from './support/database.js';

/**
 * The hot statements must keep using their indexes when statistics are stale: a table analysed
 * while empty and then filled (the state right after a deploy) is where plans flip to full scans.
 */
describe('query plans of the claim, sweep, bus, output and trigger request statements', () => {
  let client: pg.Client;

  const plan = async (sql: string, params: unknown[] = []) =>
    ((await client.query(`EXPLAIN ${sql}`, params)).rows as Array<{ 'QUERY PLAN': string }>)
      .map((r) => r['QUERY PLAN'])
      .join('\n');

  async function fill(): Promise<void> {
    await client.query(`
      INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, fence)
      SELECT 'key:' || g, CASE WHEN g % 50 = 0 THEN 'claimed' ELSE 'done' END, 'node-' || (g % 3), now() + interval '1 hour', 1
        FROM generate_series(1, 50000) g`);
    await client.query(`
      INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, dedupe_key, status, started_at)
      SELECT 'a', 'e', 'event', 'event:a:e:' || g, CASE WHEN g % 500 = 0 THEN 'running' ELSE 'done' END, now()
        FROM generate_series(1, 50000) g`);
    await client.query(`
      INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name)
      SELECT e.id, s, 'step', 's' || s FROM cyclium_episodes e, generate_series(1, 3) s`);
    // Outputs: nearly all delivered; of the pending ones, a few due, the rest leased or backing off.
    await client.query(`
      INSERT INTO cyclium_outputs (episode_id, type, dedupe_key, status, attempts, next_attempt_at)
      SELECT e.id, 't' || (row_number() OVER () % 4), 'out:' || e.id,
             CASE WHEN row_number() OVER () % 100 = 0 THEN 'pending' ELSE 'delivered' END, 1,
             now() + CASE WHEN row_number() OVER () % 1000 = 0 THEN interval '-1 minute' ELSE interval '1 minute' END
        FROM cyclium_episodes e`);
    // Trigger requests, one per episode, waiting for tomorrow (runs for later, retry backoffs and
    // sleeps) but for ten due now.
    await client.query(`
      INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node, status, opts, inserted_at, not_before)
      SELECT id, 'a', 'e', 'node-y', CASE WHEN n % 2 = 0 THEN 'pending' ELSE 'scheduled' END,
             CASE WHEN n % 2 = 0 THEN '{}'::jsonb ELSE '{"resume": true}'::jsonb END,
             now() - (n % 86400) * interval '1 second', CASE WHEN n % 5000 = 0 THEN NULL ELSE now() + interval '1 day' END
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM cyclium_episodes) e`);
    // Events in 50 transactions of 1,000, on two channels.
    for (let t = 0; t < 50; t++) {
      await client.query(
        `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at)
         SELECT CASE WHEN g % 2 = 0 THEN 'cyclium_bus' ELSE 'other' END, $1 || ':' || g, 'e', '{}', now() FROM generate_series(1, 1000) g`,
        [`t${t}`],
      );
    }
  }

  const filter = { env: null, stack: null, hosted: { a: ['e'] }, limit: 16, me: 'node-x' };
  const due = pendingStatement(filter, 604_800_000, 45_000);
  const events = new EventLog({
    channel: 'cyclium_bus',
    stackSlug: null,
    env: null,
    publisher: () => 'node-x',
  });

  beforeAll(async () => {
    client = new pg.Client({ connectionString: await freshDatabase() });
    await client.connect();
    await client.query('ANALYZE');
    await fill();
    // Prepare the adapter's statements on this very connection, then EXPLAIN EXECUTE them.
    const claims = new PostgresClaims(client);
    await claims.acquire('key:50', 'node-x', { leaseSeconds: 60 });
    await claims.renewMany('node-0', [{ key: 'key:3', fence: 1 }], 60);
    await claims.reclaimExpired(10);
    await claims.complete('key:50', 'node-x', 1);
    const from = await events.snapshot(client);
    const { events: page } = await events.readAfter(client, from, 10);
    if (page[0]) await events.readPage(client, from, from, page[0], 10);
    await events.prune(client, { olderThanMs: 3_600_000, undispatchedMs: 604_800_000 }, 10);
    // takeFromPeer cancels nothing, so no trigger requests to complete.
    const noRequests = {} as CanceledRequests;
    const queue = new EpisodeQueue({ sql: client } as unknown as CycliumDataSource, noRequests);
    await queue.takeFromPeer('a', ['e'], 'node-x', { stack: null, env: null });
  });

  afterAll(async () => {
    await client?.end();
  });

  for (const when of ['analysed while empty, then filled', 'analysed after filling'] as const) {
    it(`uses indexes, never a full scan of a large table (${when})`, async () => {
      if (when === 'analysed after filling') await client.query('ANALYZE');
      const { rows: ends } = await client.query<{ low: string; high: string }>(
        `SELECT min(tx_id)::text AS low, max(tx_id)::text AS high FROM cyclium_events`,
      );
      const { low, high } = ends[0] as { low: string; high: string };
      const hosted = '{"b": ["e"]}';
      const statements = [
        await plan(`EXECUTE cyclium_claims_insert_or_read('key:7', 'node-x', 60, NULL)`),
        await plan(
          `EXECUTE cyclium_claims_renew_many('node-0', 60, ARRAY['key:3', 'key:6'], ARRAY[1, 1]::bigint[])`,
        ),
        await plan(`EXECUTE cyclium_claims_finish('key:7', 'node-x', 'done', NULL, 1)`),
        await plan(`EXECUTE cyclium_claims_reclaim_expired(10)`),
        await plan(CANDIDATES, [
          null,
          null,
          120_000,
          45_000,
          true,
          '{"b": ["e"]}',
          false,
          null,
          null,
          500,
        ]),
        // A reader near the end of the table, with a long transaction still listed in its snapshot.
        await plan(
          `EXECUTE cyclium_events_read_after('cyclium_bus', '${high}', ARRAY['${low}']::xid8[], 500, 4194304)`,
        ),
        // Retention of one channel, walking it in the readers' order from its start.
        await plan(
          `EXECUTE cyclium_events_prune_channel('cyclium_bus', 3600000, 1000, 604800000, '0', 0)`,
        ),
        await plan(TAKE_DUE, ['node-x', ['t1', 't2'], 16, 8, 31_000, null, null]),
        await plan(`SELECT ${OutputStore.dueFragment('$1', '$2', '$3')}`, [
          ['t1', 't2'],
          's1',
          'prod',
        ]),
        await plan(
          `EXECUTE cyclium_episodes_take_from_peer('node-x', 'a', NULL, NULL, ARRAY['e'])`,
        ),
        await plan(NOT_HOSTED, [
          null,
          null,
          hosted,
          3_600_000,
          500,
          'not hosted: %s %s %s',
          'x',
          '2020-01-01Z',
          3_000,
        ]),
        await plan(due.text, due.values),
      ];
      for (const text of statements) {
        expect(text).not.toMatch(
          /Seq Scan on cyclium_(work_claims|episodes|episode_steps|events|outputs)/,
        );
      }
      // The held claims only: 1,000 of the 50,000 rows, however many finished claims pile up.
      expect(statements[3]).toMatch(/cyclium_work_claims_live/);
      expect(statements[4]).toMatch(/cyclium_episodes_status_(stack|env)|Index/);
      expect(statements[5]).toMatch(/cyclium_events_channel_tx/);
      // In the index's order: never the whole channel read off a bitmap and sorted for one batch.
      expect(statements[6]).toMatch(/Index Scan using cyclium_events_channel_tx/);
      expect(statements[6]).not.toMatch(/Sort Key: cyclium_events\./);
      expect(statements[7]).toMatch(/cyclium_outputs_due/);
      // The due check reads the due rows' scope from the table: a heap fetch for due rows only.
      expect(statements[8]).toMatch(/Index Scan using cyclium_outputs_due/);
      expect(statements[10]).toMatch(/cyclium_episodes_status_(stack|env)|Index/);
      expect(statements[11]).toMatch(
        /(Index Scan using|Bitmap Index Scan on) cyclium_trigger_requests_due/,
      );
      // A poll reads the ten requests due, not the 49,990 due tomorrow.
      const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${due.text}`, due.values);
      const read: number[] = [];
      const walk = (node: Record<string, unknown>) => {
        if (node['Relation Name'] === 'cyclium_trigger_requests')
          read.push(
            (node['Actual Rows'] as number) + ((node['Rows Removed by Filter'] as number) ?? 0),
          );
        for (const child of (node.Plans as Array<Record<string, unknown>> | undefined) ?? [])
          walk(child);
      };
      walk(
        (rows[0] as { 'QUERY PLAN': Array<{ Plan: Record<string, unknown> }> })['QUERY PLAN'][0]
          .Plan,
      );
      expect(read).toEqual([10]);
    });
  }
});
