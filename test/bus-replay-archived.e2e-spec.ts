import { afterAll, describe, expect, it } from '@jest/globals';
import { startBusNode } from './support/bus-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/** archiveAfter, busUndispatchedMaxAgeMs and triggerRequestTtlMs alike; a retention pass every 300 ms. */
const WINDOWS = { BUS_ARCHIVE_AFTER_MS: '2500', BUS_DEBOUNCE_MS: '400' };
const XS = Array.from({ length: 10 }, (_, i) => `once-x-${i}`);
const DS = [1, 2, 3].map((i) => `once-d-${i}`);

/**
 * Exactly one episode per accepted event, for any stop and any legal windows, with real node
 * processes: the episodes of a node's events finish and are archived (their dedupe keys freed),
 * the whole cluster stops, and the node that boots replays from a position that lagged behind them
 * (set back by the test, as a lagging flush would leave it) while the events are still stored (their
 * deletes dropped, as a lagging prune would leave them). Neither a plain event nor a debounce
 * window's trailing event may start a second episode; each is skipped with its reason instead.
 */
describe('a replay that meets events whose episodes were archived', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  const boot = async () => {
    const node = await startBusNode(database.url, 'replayer', 'x,debounce', WINDOWS);
    nodes.push(node);
    return node;
  };

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  async function episodesPerEvent(): Promise<Map<string, number>> {
    const { rows } = await database.db.query<{ event_id: string; n: number }>(
      `SELECT trigger_ref->>'eventId' AS event_id, count(*)::int AS n FROM cyclium_episodes GROUP BY 1`,
    );
    return new Map(rows.map((r) => [r.event_id, r.n]));
  }

  const scalar = async (sql: string) => Number((await database.db.query(sql)).rows[0].n);

  it('starts no second episode for them after a whole-cluster stop, and records each as skipped', async () => {
    await database.db.query(`
      CREATE FUNCTION test_keep_events() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
      CREATE TRIGGER test_keep_events BEFORE DELETE ON cyclium_events
        FOR EACH ROW EXECUTE FUNCTION test_keep_events();`);
    const lagging = (await database.db.query(`SELECT pg_current_snapshot()::text AS s`)).rows[0]
      .s as string;
    const node = await boot();
    for (const id of XS)
      await post(node, '/events', { type: 'test.x', eventId: id, payload: { n: 1 } });
    for (const id of DS)
      await post(node, '/events', { type: 'test.d', eventId: id, payload: { subject: 'once-d' } });

    const archived = `SELECT count(*) AS n FROM cyclium_episodes WHERE status = 'done' AND archived_at IS NOT NULL`;
    await waitFor(
      'every episode done and archived',
      async () => (await scalar(archived)) === XS.length + 1,
      20_000,
    );
    await node.stop('SIGTERM');
    await database.db.query(`UPDATE cyclium_bus_positions SET position = $1::pg_snapshot`, [
      lagging,
    ]);

    await boot();
    // The replay settled every event again: both positions moved past all of them.
    const behind = `SELECT count(*) AS n FROM cyclium_events e JOIN cyclium_bus_positions p ON p.channel = e.channel
                     WHERE starts_with(e.event_id, 'once-') AND NOT pg_visible_in_snapshot(e.tx_id, p.position)`;
    await waitFor(
      'the replay to pass every event',
      async () => (await scalar(behind)) === 0,
      20_000,
    );
    const byEvent = await episodesPerEvent();
    expect(XS.map((id) => byEvent.get(id) ?? 0)).toEqual(XS.map(() => 1));
    expect(DS.map((id) => byEvent.get(id) ?? 0)).toEqual([0, 0, 1]);

    const positions = `SELECT consumer, skipped::int AS skipped, last_skip FROM cyclium_bus_positions ORDER BY 1`;
    const { rows } = await database.db.query(positions);
    expect(rows.map((r) => [r.consumer, r.skipped])).toEqual([
      ['bus_debounce.settle', DS.length],
      ['bus_x.on_x', XS.length],
    ]);
    expect(rows[1].last_skip).toContain('retention.archiveAfter');
  });
});
