import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { startAll, startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { nodesOf, type PlanNode } from './support/plan-nodes.js';
import { waitFor } from './support/wait-for.js';

const WAITS_NODE = fileURLToPath(new URL('./fixtures/dist/waits-node.js', import.meta.url));
/** The bus channel of a node without a stack or env (busChannel(null, null)). */
const CHANNEL = 'cyclium_bus';
const TYPE = 'payment.settled';
const EPISODES = 1_000;
/** Non-matching events published per matching one. */
const OTHERS_PER_MATCH = 10;
/** Events per measured batch (the cost figures). */
const BATCH = 2_000;
/** Runs per measured state; the cheapest counts, so a busy neighbour on the two cores does not. */
const RUNS = 3;

/**
 * The columns EventAppender writes for a publish (libs/cyclium/src/bus/event-appender.ts): `rows`
 * is a SELECT of (event_id, payload), one row per event. Matching is the AFTER INSERT trigger on
 * cyclium_events (cyclium_match_event_waits), not the node that publishes, so large INSERTs
 * straight into the table stand for 11,000 publishes at a fraction of the cost.
 */
const insertEvents = (rows: string) => `
  INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher,
                              source_stack, source_env, signature)
  SELECT '${CHANNEL}', r.event_id, '${TYPE}', r.payload, now(), 'event-waits-test', NULL, NULL,
         NULL
    FROM (${rows}) AS r (event_id, payload)`;

/** `n` events whose orderId no wait has, ids prefixed with `tag`. */
const nonMatching = (tag: string, n: number) =>
  insertEvents(`SELECT '${tag}-' || g, jsonb_build_object('orderId', 'nobody-${tag}-' || g,
                                                          'amount', -1)
                  FROM generate_series(1, ${n}) g`);

const scalar = async (db: pg.Pool | pg.PoolClient, sql: string, params: unknown[] = []) =>
  Number((await db.query<{ v: string | number }>(sql, params)).rows[0]?.v);

/**
 * Event waits (`ep.waitForEvent`) at scale: the matching of events to waits is indexed (its cost
 * per event does not grow with the number of waiting episodes), and 1,000 waiting episodes of two
 * real node processes each wake once, for their own event, among 11,000.
 */
describe('event waits at scale', () => {
  const database = useDatabase(4);

  /**
   * What one event costs the match trigger, with 0, 1,000 and 10,000 waits registered for other
   * orderIds, on one connection and nothing else running: the waits are written with SQL as
   * EventWaitStore.register writes them (a shape row, then one row per wait), since the trigger
   * reads only those rows. Each batch is rolled back, so every state starts from the same events.
   */
  describe('the cost of an event', () => {
    let client: pg.PoolClient;
    const notices: string[] = [];

    beforeAll(async () => {
      client = await database.db.connect();
      client.on('notice', (notice) => notices.push(notice.message ?? ''));
    });

    afterAll(async () => {
      await client?.query(`DELETE FROM cyclium_event_waits`);
      // Closed, not returned to the pool: auto_explain stays loaded in it.
      client?.release(true);
    });

    /** Buffers read (hit or not) on the trigger's two tables and their indexes, all backends. */
    const triggerBlocks = async () => {
      // The backend's counters reach the shared statistics at its next idle moment; now.
      await client.query(`SELECT pg_stat_force_next_flush()`);
      await client.query(`SELECT pg_stat_clear_snapshot()`);
      return scalar(
        client,
        `SELECT coalesce(sum(heap_blks_hit + heap_blks_read + coalesce(idx_blks_hit, 0)
                             + coalesce(idx_blks_read, 0)), 0) AS v
           FROM pg_statio_user_tables
          WHERE relname IN ('cyclium_event_waits', 'cyclium_event_wait_shapes')`,
      );
    };

    interface Cost {
      /** The trigger's time per event, ms (EXPLAIN ANALYZE's "Trigger …: time=… calls=…"). */
      ms: number;
      /** Buffers the trigger read per event, on its tables. */
      blocks: number;
      /** Buffers the INSERT itself read per event (the events table and its indexes). */
      insertBlocks: number;
    }

    const measureOnce = async (tag: string): Promise<Cost> => {
      const before = await triggerBlocks();
      await client.query('BEGIN');
      let explained;
      try {
        explained = await client.query<{ 'QUERY PLAN': unknown }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${nonMatching(tag, BATCH)}`,
        );
      } finally {
        await client.query('ROLLBACK');
      }
      const after = await triggerBlocks();
      const [report] = explained.rows[0]?.['QUERY PLAN'] as Array<{
        Plan: PlanNode;
        Triggers: Array<{ 'Trigger Name': string; Time: number; Calls: number }>;
      }>;
      const trigger = report?.Triggers.find(
        (t) => t['Trigger Name'] === 'cyclium_events_match_waits',
      );
      if (!report || !trigger) throw new Error(`no match trigger ran: ${JSON.stringify(report)}`);
      expect(trigger.Calls).toBe(BATCH);
      return {
        ms: trigger.Time / trigger.Calls,
        blocks: (after - before) / BATCH,
        insertBlocks:
          ((report.Plan['Shared Hit Blocks'] ?? 0) + (report.Plan['Shared Read Blocks'] ?? 0)) /
          BATCH,
      };
    };

    /** The cheapest of RUNS batches, each figure on its own. */
    const measure = async (tag: string): Promise<Cost> => {
      const runs: Cost[] = [];
      for (let run = 0; run < RUNS; run++) runs.push(await measureOnce(`${tag}-${run}`));
      return {
        ms: Math.min(...runs.map((r) => r.ms)),
        blocks: Math.min(...runs.map((r) => r.blocks)),
        insertBlocks: Math.min(...runs.map((r) => r.insertBlocks)),
      };
    };

    /** Registers waits for orderIds `order-<from>` … `order-<to>`, as EventWaitStore does. */
    const registerWaits = async (from: number, to: number) => {
      await client.query(
        `INSERT INTO cyclium_event_wait_shapes (channel, event_type, fields)
         VALUES ($1, $2, '{orderId}') ON CONFLICT DO NOTHING`,
        [CHANNEL, TYPE],
      );
      await client.query(
        `INSERT INTO cyclium_event_waits (episode_id, step_no, channel, event_type, fields, match)
         SELECT gen_random_uuid(), 1, $1, $2, '{orderId}',
                jsonb_build_object('orderId', 'order-' || g)
           FROM generate_series($3::int, $4::int) g`,
        [CHANNEL, TYPE, from, to],
      );
      // Settles the table now, so autovacuum does not read it (and count) during a batch.
      await client.query(`VACUUM ANALYZE cyclium_event_waits`);
    };

    const pages = () =>
      scalar(
        client,
        `SELECT pg_relation_size('cyclium_event_waits') / current_setting('block_size')::int AS v`,
      );

    const figures = (cost: Cost) =>
      `${cost.ms.toFixed(4)} ms and ${cost.blocks.toFixed(2)} buffers in the trigger, ` +
      `${cost.insertBlocks.toFixed(2)} buffers in the insert`;

    it('per event, the trigger reads no more with 1,000 or 10,000 waits', async () => {
      await measure('warm-up');
      // No wait now, but one had this shape: the trigger looks it up, and finds nothing.
      await registerWaits(1, 0);
      const none = await measure('none');
      await registerWaits(1, 1_000);
      const thousand = await measure('thousand');
      const pagesAtThousand = await pages();
      await registerWaits(1_001, 10_000);
      const tenThousand = await measure('ten-thousand');
      const pagesAtTenThousand = await pages();
      console.log(
        `event waits, per non-matching ${TYPE} event (cheapest of ${RUNS} batches of ${BATCH}):` +
          `\n  0 waits:      ${figures(none)}` +
          `\n  1,000 waits:  ${figures(thousand)} (the waits' table: ${pagesAtThousand} pages)` +
          `\n  10,000 waits: ${figures(tenThousand)} (the waits' table: ${pagesAtTenThousand} ` +
          `pages)`,
      );
      // The trigger looked its shape up for every event (2 buffers).
      expect(none.blocks).toBeGreaterThanOrEqual(2);
      // With waits, every event adds one descent of the waits' index (root and leaf: 2 buffers,
      // which the empty index of no wait does not need), one level more by 10,000 waits. A scan
      // of the waits instead reads every page of their table per event (the pages printed above).
      expect(thousand.blocks).toBeLessThan(3 * none.blocks);
      expect(tenThousand.blocks).toBeLessThan(1.5 * thousand.blocks);
      // The trigger's time is printed, not asserted: timings on shared cores are the bench's
      // (`npm run bench -- waits`), buffers are this test's.
    });

    it("the trigger's lookup with 1,000 waits is an Index Scan on its index", async () => {
      await client.query(`DELETE FROM cyclium_event_waits`);
      await registerWaits(1, 1_000);
      // auto_explain prints the plans of the statements run inside the trigger (nested), as they
      // ran there, as notices to this connection; no setting of the planner's is changed.
      await client.query(`LOAD 'auto_explain'`);
      for (const setting of [
        'log_min_duration = 0',
        'log_nested_statements = on',
        'log_analyze = on',
        'log_buffers = on',
        'log_format = json',
        'log_level = notice',
      ])
        await client.query(`SET auto_explain.${setting}`);
      notices.length = 0;
      await client.query('BEGIN');
      try {
        // One event for an orderId that waits, and one for nobody: each runs the lookup once, in
        // the plan the trigger's cached statement uses by now (thousands of runs in this session).
        await client.query(
          insertEvents(`VALUES ('explain-1', '{"orderId": "order-500", "amount": 5}'::jsonb)`),
        );
        await client.query(nonMatching('explain-2', 1));
      } finally {
        await client.query('ROLLBACK');
        await client.query(`SET auto_explain.log_min_duration = -1`);
      }
      const lookups = notices
        .map((notice) => notice.slice(notice.indexOf('{')))
        .map((text) => JSON.parse(text) as { 'Query Text': string; Plan: PlanNode })
        .filter((explained) => explained['Query Text'].includes('UPDATE cyclium_event_waits'));
      expect(lookups).toHaveLength(2);
      for (const [what, lookup] of [
        ['a matching event', lookups[0]],
        ['an event for nobody', lookups[1]],
      ] as const) {
        const scans = nodesOf(lookup?.Plan as PlanNode).filter(
          (n) => n['Node Type'].endsWith('Scan') && n['Relation Name'] === 'cyclium_event_waits',
        );
        console.log(
          `event waits, the trigger's lookup with 1,000 waits, for ${what}: ` +
            scans
              .map(
                (n) =>
                  `${n['Node Type']} on ${n['Index Name'] ?? n['Relation Name']}, ` +
                  `${(n['Shared Hit Blocks'] ?? 0) + (n['Shared Read Blocks'] ?? 0)} buffers`,
              )
              .join('; '),
        );
        expect(scans.map((n) => [n['Node Type'], n['Index Name']])).toEqual([
          ['Index Scan', 'cyclium_event_waits_match'],
        ]);
      }
    });
  });

  /**
   * 1,000 episodes of real node processes wait for `payment.settled` with their own orderId; 1,000
   * matching events and 10,000 others are stored, interleaved: each episode wakes once, for its
   * own event, and the others wake nobody.
   */
  describe('1,000 waiting episodes and 11,000 events', () => {
    const nodes: DemoNode[] = [];

    beforeAll(async () => {
      await database.db.query(`DELETE FROM cyclium_event_waits`);
      await database.db.query(`CREATE TABLE wait_runs (episode_id uuid, what text)`);
      // Both boot at once: neither has anything to do until the test triggers.
      nodes.push(
        ...(await startAll(
          ['events-a', 'events-b'].map((id) =>
            startNodeProcess(WAITS_NODE, database.url, {
              // A lease that a loaded machine's stalls do not outlast: a lapse would let the peer
              // restart an episode, a third run this test counts as a wrong one.
              env: { CYCLIUM_NODE_ID: id, WAITS_LEASE_SECONDS: '15' },
              ready: async (node) =>
                (await node.get<{ status: string }>('/health')).status === 'ok',
            }),
          ),
        )),
      );
    });

    afterAll(async () => {
      await Promise.all(nodes.map((node) => node.stop('SIGTERM')));
    });

    const trigger = async (node: DemoNode, orderId: string): Promise<string> => {
      const response = await fetch(`http://127.0.0.1:${node.port}/trigger/payments/pay`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ orderId, timeoutMs: 120_000 }),
      });
      const body = (await response.json()) as { status: string; episodeId: string | null };
      if (response.status !== 202 || !body.episodeId)
        throw new Error(`trigger ${orderId}: ${response.status} ${JSON.stringify(body)}`);
      return body.episodeId;
    };

    // Its phases have deadlines of their own (a minute each); the test's covers them all.
    it('each episode wakes once, for its own event; the 10,000 others match nothing', async () => {
      const started = Date.now();
      // Spread over both nodes, 20 calls in flight.
      let next = 0;
      await Promise.all(
        Array.from({ length: 20 }, async () => {
          while (next < EPISODES) {
            const i = next++;
            await trigger(nodes[i % nodes.length] as DemoNode, `order-${i}`);
          }
        }),
      );
      const waitingCount = () =>
        scalar(
          database.db,
          `SELECT count(*) AS v FROM cyclium_episodes
            WHERE expectation_id = 'pay' AND status = 'waiting'`,
        );
      await waitFor(
        'all 1,000 episodes to wait',
        async () => (await waitingCount()) === EPISODES,
        60_000,
        250,
      );
      const triggered = Date.now();
      expect(
        await scalar(
          database.db,
          `SELECT count(*) AS v FROM cyclium_event_waits
                                    WHERE event_row IS NULL`,
        ),
      ).toBe(EPISODES);

      // Interleaved: every 11th event is the one of order-<n>, the others are for nobody.
      const total = EPISODES * (OTHERS_PER_MATCH + 1);
      const statements = 4;
      const per = total / statements;
      for (let s = 0; s < statements; s++)
        await database.db.query(
          insertEvents(`
            SELECT CASE WHEN g % 11 = 10 THEN 'settled-order-' || g / 11 ELSE 'other-' || g END,
                   CASE WHEN g % 11 = 10
                        THEN jsonb_build_object('orderId', 'order-' || g / 11, 'amount', g / 11 + 1)
                        ELSE jsonb_build_object('orderId', 'other-' || g, 'amount', -1) END
              FROM generate_series(${s * per}, ${(s + 1) * per - 1}) g`),
        );
      const published = Date.now();

      const unfinished = () =>
        scalar(
          database.db,
          `SELECT count(*) AS v FROM cyclium_episodes
            WHERE expectation_id = 'pay'
              AND status NOT IN ('done', 'failed', 'partially_failed', 'canceled')`,
        );
      await waitFor('every episode to end', async () => (await unfinished()) === 0, 60_000, 250);
      console.log(
        `event waits: ${EPISODES} episodes waiting after ${triggered - started} ms; ` +
          `${total} events stored in ${published - triggered} ms; all ended ` +
          `${Date.now() - published} ms later`,
      );

      // Every episode done, with its own event's amount and id.
      const { rows } = await database.db.query<{
        order_id: string;
        status: string;
        result: unknown;
      }>(
        `SELECT trigger_ref -> 'payload' ->> 'orderId' AS order_id, status, result
           FROM cyclium_episodes WHERE expectation_id = 'pay'`,
      );
      expect(rows).toHaveLength(EPISODES);
      const wrong = rows.filter((row) => {
        const n = Number(row.order_id.slice('order-'.length));
        return !(
          row.status === 'done' &&
          JSON.stringify(row.result) ===
            JSON.stringify({ amount: n + 1, eventId: `settled-order-${n}` })
        );
      });
      expect(wrong).toEqual([]);

      // Each ran twice (began, then woke once) and its wake-up was taken once.
      const runs = await database.db.query(
        `SELECT e.id, count(r.*) AS runs FROM cyclium_episodes e
           LEFT JOIN wait_runs r ON r.episode_id = e.id AND r.what = 'pay'
          WHERE e.expectation_id = 'pay' GROUP BY e.id HAVING count(r.*) <> 2`,
      );
      expect(runs.rows).toEqual([]);
      const wakeUps = await database.db.query(
        `SELECT e.id, count(q.*) AS requests, count(q.claimed_by) AS taken
           FROM cyclium_episodes e
           LEFT JOIN cyclium_trigger_requests q
             ON q.episode_id = e.id AND q.opts ->> 'wake' = 'wait'
          WHERE e.expectation_id = 'pay' GROUP BY e.id
         HAVING count(q.*) <> 1 OR count(q.claimed_by) <> 1`,
      );
      expect(wakeUps.rows).toEqual([]);
      const takers = await database.db.query<{ node: string; n: number }>(
        `SELECT claimed_by AS node, count(*)::int AS n FROM cyclium_trigger_requests
          WHERE opts ->> 'wake' = 'wait' GROUP BY 1 ORDER BY 1`,
      );
      console.log(
        `event waits: wake-ups taken by ${takers.rows.map((r) => `${r.node} ${r.n}`).join(', ')}`,
      );

      // The database woke a waiting episode once per matching event, and never for another: each
      // wake-up it announces is one event of the library's (cyclium_wake_wait).
      expect(
        await scalar(
          database.db,
          `SELECT count(*) AS v FROM cyclium_events
            WHERE type = 'cyclium.trigger_requests.pending' AND payload ->> 'node' = 'database'`,
        ),
      ).toBe(EPISODES);
      expect(await scalar(database.db, `SELECT count(*) AS v FROM cyclium_event_waits`)).toBe(0);
    }, 240_000);
  });
});
