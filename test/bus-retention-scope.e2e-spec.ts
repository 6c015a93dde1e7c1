import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, post, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const EVENTS = 5;
const PROD_RETENTION_MS = 3_000;
const RC_RETENTION_MS = 1_000;
const RC_UNDISPATCHED_MS = 2_000;

/** Production keeps what it dispatched for 3 s and what it did not for a week (the default). */
const PROD = {
  ...FAST_RECOVERY,
  CYCLIUM_ENV: 'prod',
  DEMO_BUS_RETENTION_MS: String(PROD_RETENTION_MS),
};
/** A release candidate on the same database, with windows shorter than any of production's. */
const RC = {
  ...FAST_RECOVERY,
  CYCLIUM_ENV: 'rc',
  DEMO_BUS_RETENTION_MS: String(RC_RETENTION_MS),
  DEMO_BUS_UNDISPATCHED_MS: String(RC_UNDISPATCHED_MS),
};

const ids = (prefix: string) => Array.from({ length: EVENTS }, (_, i) => `${prefix}-${i}`);

/**
 * Bus retention is per stack and env, on real node processes of two envs sharing one database: an
 * `rc` node whose windows are shorter than production's deletes only rc's events, never
 * production's, whether production dispatched them or not (its nodes down, its events waiting for
 * them). A trigger on cyclium_events records every deletion with its row's age by the database
 * clock, so the test sees who kept to which window, not only what is left.
 */
describe('bus retention, scoped: two envs on one database with different windows', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];
  const boot = async (id: string, env: Record<string, string>) => {
    const node = await startNode(database.url, id, env);
    nodes.push(node);
    return node;
  };
  const scalar = async (sql: string, params: unknown[] = []) => {
    return Number((await database.db.query(sql, params)).rows[0].n);
  };
  /** How many of `eventIds` are in `table`: cyclium_events (stored) or audit_events (deleted). */
  const countIn = (table: string, eventIds: string[]) => {
    return scalar(`SELECT count(*) AS n FROM ${table} WHERE event_id = ANY($1)`, [eventIds]);
  };
  const publish = (node: DemoNode, eventId: string) =>
    post(node, '/events', {
      type: 'resource.rebalance',
      eventId,
      payload: { resource: eventId, stepMs: 1 },
    });
  /** Waits until, by the database clock, the newest of `eventIds` was stored `ms` ago. */
  const aged = (eventIds: string[], ms: number) =>
    waitFor(
      `events ${eventIds[0]}… to be ${ms} ms old`,
      async () => {
        const sql = `SELECT clock_timestamp() >= max(created_at) + make_interval(secs => $2::float8 / 1000) AS old
                       FROM cyclium_events WHERE event_id = ANY($1)`;
        return (await database.db.query(sql, [eventIds, ms])).rows[0].old === true;
      },
      15_000,
      100,
    );

  let prod: DemoNode;
  let rc: DemoNode;

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE audit_events (channel text, event_id text, age_ms float8);
      CREATE FUNCTION audit_event() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO audit_events
        VALUES (OLD.channel, OLD.event_id, extract(epoch FROM clock_timestamp() - OLD.created_at) * 1000);
        RETURN NULL;
      END $$;
      CREATE TRIGGER audit_delete AFTER DELETE ON cyclium_events FOR EACH ROW EXECUTE FUNCTION audit_event();`);
    [prod, rc] = await Promise.all([boot('prod-1', PROD), boot('rc-1', RC)]);
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const title = "never deletes production's events from an rc node, dispatched or not";
  it(`${title}; production runs them and prunes by its own window`, async () => {
    // Dispatched by production, whose node then drains (its positions pass them) and stops.
    const dispatched = ids('prod-dispatched');
    for (const eventId of dispatched) await publish(prod, eventId);
    const done = `SELECT count(DISTINCT trigger_ref->>'eventId') AS n FROM cyclium_episodes
                   WHERE trigger_ref->>'eventId' = ANY($1) AND status = 'done' AND source_env = 'prod'`;
    const ran = (eventIds: string[]) => async () => (await scalar(done, [eventIds])) === EVENTS;
    const gone = (eventIds: string[]) => async () =>
      (await countIn('audit_events', eventIds)) === EVENTS;
    await waitFor('production to run its events', ran(dispatched), 20_000, 100);
    await prod.stop('SIGTERM');

    // Published while no production node runs (a publisher-only service): production's position is behind them.
    const waiting = ids('prod-waiting');
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher, source_env)
       SELECT $1, e, 'resource.rebalance', jsonb_build_object('resource', e, 'stepMs', 1), now(), 'publisher', 'prod'
         FROM unnest($2::text[]) e`,
      [busChannel(null, 'prod'), waiting],
    );

    // Past both of rc's windows, rc prunes its own events: a pass that walked past production's rows, had it read them.
    await aged([...dispatched, ...waiting], RC_UNDISPATCHED_MS + 500);
    const own = ids('rc');
    for (const eventId of own) await publish(rc, eventId);
    await waitFor('rc to prune its own events', gone(own), 20_000, 100);
    expect(await countIn('cyclium_events', [...dispatched, ...waiting])).toBe(2 * EVENTS);

    // Production comes back: it runs what waited for it, once each, and prunes what it had dispatched.
    await boot('prod-2', PROD);
    await waitFor('production to run what waited for it', ran(waiting), 20_000, 100);
    const episodes = `SELECT count(*) AS n FROM cyclium_episodes WHERE trigger_ref->>'eventId' = ANY($1)`;
    expect(await scalar(episodes, [[...dispatched, ...waiting]])).toBe(2 * EVENTS);
    await waitFor('production to prune what it dispatched', gone(dispatched), 20_000, 100);

    // Each env's rows went by its own windows: none of production's before 3 s, none of rc's before 1 s.
    const early = await database.db.query(
      `SELECT channel, event_id, age_ms FROM audit_events
        WHERE (channel = $1 AND age_ms < $2) OR (channel = $3 AND age_ms < $4) OR channel NOT IN ($1, $3)`,
      [busChannel(null, 'prod'), PROD_RETENTION_MS, busChannel(null, 'rc'), RC_RETENTION_MS],
    );
    expect(early.rows).toEqual([]);
  }, 120_000);
});
