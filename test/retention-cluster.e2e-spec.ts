import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const EVENTS = 300;
const ARCHIVE_AFTER_MS = 5_000;
const DELETE_AFTER_MS = 2_000;

/** Short windows, a pass every 300 ms in batches of 20, so retention runs all through the load. */
const RETENTION = {
  ...FAST_RECOVERY,
  DEMO_BUS_RETENTION_MS: '1000',
  DEMO_BUS_UNDISPATCHED_MS: String(ARCHIVE_AFTER_MS),
  DEMO_TRIGGER_TTL_MS: String(ARCHIVE_AFTER_MS),
  DEMO_ARCHIVE_AFTER_MS: String(ARCHIVE_AFTER_MS),
  DEMO_DELETE_AFTER_MS: String(DELETE_AFTER_MS),
  DEMO_RETENTION_EVERY_MS: '300',
  DEMO_RETENTION_BATCH: '20',
};

/**
 * Three demo nodes archive and delete with windows of seconds while 300 events flow and one node is
 * `kill -9`-ed. Triggers on the tables record, by the database clock, every episode inserted,
 * archived and deleted and every output deleted, so the test sees what retention did, not only what
 * is left: nothing archived or deleted before its window, nothing live touched, every event answered
 * 202 run once to `done`.
 */
describe('retention under load on three nodes, one killed', () => {
  const database = useDatabase();
  const live: DemoNode[] = [];
  const killed: DemoNode[] = [];
  const scalar = async (sql: string, params: unknown[] = []) =>
    Number((await database.db.query(sql, params)).rows[0].n);

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE audit_episodes (op text, id uuid, actor_id text, status text, event_id text,
                                   finished_at timestamptz, archived_at timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp());
      CREATE TABLE audit_outputs (episode_id uuid, status text, at timestamptz NOT NULL DEFAULT clock_timestamp());
      CREATE FUNCTION audit_episode() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE r cyclium_episodes;
      BEGIN
        r := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
        INSERT INTO audit_episodes (op, id, actor_id, status, event_id, finished_at, archived_at)
        VALUES (lower(TG_OP), r.id, r.actor_id, r.status, r.trigger_ref->>'eventId', r.finished_at, r.archived_at);
        RETURN NULL;
      END $$;
      CREATE TRIGGER audit_insert AFTER INSERT ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION audit_episode();
      CREATE TRIGGER audit_archive AFTER UPDATE OF archived_at ON cyclium_episodes FOR EACH ROW
        WHEN (OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL) EXECUTE FUNCTION audit_episode();
      CREATE TRIGGER audit_delete AFTER DELETE ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION audit_episode();
      CREATE FUNCTION audit_output() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO audit_outputs (episode_id, status) VALUES (OLD.episode_id, OLD.status); RETURN NULL; END $$;
      CREATE TRIGGER audit_output_delete AFTER DELETE ON cyclium_outputs FOR EACH ROW EXECUTE FUNCTION audit_output();`);
    live.push(
      ...(await Promise.all(
        ['ret-1', 'ret-2', 'ret-3'].map((id) => startNode(database.url, id, RETENTION)),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all([...live, ...killed].map((node) => node.stop('SIGKILL')));
  });

  /** Publishes event i through some live node, retried elsewhere with the same event id. */
  async function publish(i: number): Promise<void> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const node = live[(i + attempt) % live.length] as DemoNode;
      try {
        const response = await fetch(`http://127.0.0.1:${node.port}/events`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            type: 'resource.rebalance',
            eventId: `kept-${i}`,
            payload: { resource: `kept-${i}`, stepMs: 20, outputKey: `kept-${i}` },
          }),
        });
        if (response.status === 202) return;
      } catch {
        // that node was just killed: the next one takes the same event id
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`could not publish event ${i}`);
  }

  it('archives and deletes only what is past its window, and every event answered 202 runs once to done', async () => {
    for (let i = 0; i < EVENTS; i++) {
      await publish(i);
      if (i === Math.floor(EVENTS / 3)) {
        const victim = live.pop() as DemoNode;
        killed.push(victim);
        await victim.stop('SIGKILL');
      }
      await new Promise((r) => setTimeout(r, 40));
    }
    const loadEnded = (await database.db.query<{ now: Date }>(`SELECT clock_timestamp() AS now`))
      .rows[0]?.now as Date;

    // Every event's episode ends done and, the windows past, is archived and deleted.
    const events = `SELECT count(DISTINCT event_id)::int AS n FROM audit_episodes WHERE actor_id = 'resource_rebalancer' AND event_id LIKE 'kept-%'`;
    await waitFor(
      'every event to have been run, archived and deleted',
      async () => (await scalar(`${events} AND op = 'delete'`)) === EVENTS,
      90_000,
      250,
    );

    // Exactly one episode per event answered 202, and each one ended done.
    expect(await scalar(`${events} AND op = 'insert'`)).toBe(EVENTS);
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM audit_episodes WHERE op = 'insert' AND event_id LIKE 'kept-%'`,
      ),
    ).toBe(EVENTS);
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM audit_episodes WHERE op = 'delete' AND event_id LIKE 'kept-%' AND status <> 'done'`,
      ),
    ).toBe(0);

    // Nothing archived before archiveAfter past its end, nothing deleted before deleteAfter past its archiving, nothing live.
    const early = await database.db.query(
      `SELECT op, id, status, finished_at, archived_at, at FROM audit_episodes
        WHERE (op = 'update' AND (archived_at - finished_at < make_interval(secs => $1::float8 / 1000) OR status NOT IN ('done', 'partially_failed', 'failed', 'canceled')))
           OR (op = 'delete' AND (archived_at IS NULL OR at - archived_at < make_interval(secs => $2::float8 / 1000)
                                  OR status NOT IN ('done', 'partially_failed', 'failed', 'canceled')))`,
      [ARCHIVE_AFTER_MS, DELETE_AFTER_MS],
    );
    expect(early.rows).toEqual([]);
    expect(
      await scalar(`SELECT count(*)::int AS n FROM audit_outputs WHERE status = 'pending'`),
    ).toBe(0);
    expect(await scalar(`SELECT count(*)::int AS n FROM audit_outputs`)).toBeGreaterThanOrEqual(
      EVENTS,
    );

    // Retention ran during the load, not only after it: the earliest deletions came while events still flowed.
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM audit_episodes WHERE op = 'delete' AND at < $1`,
        [loadEnded],
      ),
    ).toBeGreaterThan(EVENTS / 5);
    // What is left is what is inside its windows, and no journal row outlived its episode.
    expect(
      await scalar(
        `SELECT count(*)::int AS n FROM cyclium_episode_steps s WHERE NOT EXISTS (SELECT 1 FROM cyclium_episodes e WHERE e.id = s.episode_id)`,
      ),
    ).toBe(0);
  }, 180_000);
});
