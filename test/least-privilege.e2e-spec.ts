import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { PostgresBus, busChannel } from '@cyclium/nestjs/adapters';
import { cycliumGrants } from '@cyclium/nestjs/migrations';
import { startBusNode } from './support/bus-node.js';
import type { DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Roles are the server's, not one database's: each test file run creates its own. */
const suffix = `${process.pid}_${process.env.JEST_WORKER_ID ?? '0'}`;
const ROLES = {
  worker: `cyc_worker_${suffix}`,
  publisher: `cyc_publisher_${suffix}`,
  reader: `cyc_reader_${suffix}`,
};
/** A publisher of one stack and env's channel. */
const SCOPED = { role: `cyc_scoped_${suffix}`, stackSlug: 'billing', env: 'rc' };
const ALL_ROLES = [...Object.values(ROLES), SCOPED.role];

/** The columns a publisher sets, and values for them on its own channel (the default one). */
const INSERT = 'INSERT INTO cyclium_events ';
const RC = busChannel(null, 'rc');
const EVENT = 'channel, event_id, type, payload, published_at';
const values = (eventId: string) => `'${busChannel(null, null)}', '${eventId}', 't', '{}', now()`;

const as = (url: string, role: string) => {
  const target = new URL(url);
  target.username = role;
  target.password = 'least-privilege';
  return target.toString();
};

/**
 * The grants of cycliumGrants, each role logged in for real: a worker node runs its episodes with
 * the worker's; a publisher-only service publishes events that the worker runs, and every write of
 * execution state it tries is refused; the reader reads and writes nothing.
 */
describe('least privilege: the worker, publisher and reader grants', () => {
  const database = useDatabase();
  let worker: DemoNode | undefined;
  let publisher: pg.Pool;
  let reader: pg.Pool;
  let bus: PostgresBus;

  beforeAll(async () => {
    for (const role of ALL_ROLES)
      await database.db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'least-privilege'`);
    const grants = [...cycliumGrants(ROLES), ...cycliumGrants({ publisher: SCOPED })];
    for (const statement of grants) await database.db.query(statement);
    worker = await startBusNode(as(database.url, ROLES.worker), 'lp-worker', 'x');
    publisher = new pg.Pool({ connectionString: as(database.url, ROLES.publisher), max: 2 });
    reader = new pg.Pool({ connectionString: as(database.url, ROLES.reader), max: 1 });
    for (const p of [publisher, reader]) p.on('error', () => undefined);
    bus = new PostgresBus(
      publisher,
      () => ({ connectionString: as(database.url, ROLES.publisher) }),
      {
        channel: busChannel(null, null),
        publisher: () => 'lp-publisher',
      },
    );
  }, 60_000);

  afterAll(async () => {
    await worker?.stop('SIGKILL');
    await publisher?.end();
    await reader?.end();
    for (const role of ALL_ROLES) {
      await database.db.query(`DROP OWNED BY ${role}`).catch(() => undefined);
      await database.db.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    }
  });

  it('a publisher-only service publishes events a worker node with the worker grants runs', async () => {
    const event = await bus.publish('test.x', { n: 1 });
    const ran = await waitFor('the episode of the event', async () => {
      const { rows } = await database.db.query(
        `SELECT status, owner_node FROM cyclium_episodes WHERE trigger_ref->>'eventId' = $1`,
        [event.eventId],
      );
      return rows[0]?.status === 'done' ? rows[0] : null;
    });
    expect(ran).toEqual({ status: 'done', owner_node: 'lp-worker' });
  });

  it.each([
    [
      'an episode',
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status) VALUES ('bus_x', 'on_x', 'manual', '{}', 'deferred')`,
    ],
    [
      'a trigger request',
      `INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node) VALUES (gen_random_uuid(), 'bus_x', 'on_x', 'p')`,
    ],
    [
      'a checkpoint',
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state) VALUES (gen_random_uuid(), 1, 's1', '{}')`,
    ],
    [
      'a claim',
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until) VALUES ('k', 'claimed', 'p', now())`,
    ],
    [
      'a node row',
      `INSERT INTO cyclium_nodes (node_identity, mode, hostname, pid, version) VALUES ('forged', 'full', 'h', 1, 'v')`,
    ],
    ['a cancel request', `UPDATE cyclium_episodes SET cancel_requested_at = now()`],
    ['a workflow instance', `UPDATE cyclium_workflow_instances SET status = 'failed'`],
    [
      'an output',
      `INSERT INTO cyclium_outputs (episode_id, type, dedupe_key) VALUES (gen_random_uuid(), 't', 'k')`,
    ],
    ['the events of others', `DELETE FROM cyclium_events`],
    [
      'an event with its own id',
      `${INSERT}(id, ${EVENT}) OVERRIDING SYSTEM VALUE VALUES (9e9, ${values('f1')})`,
    ],
    [
      'an event with its own transaction id',
      `${INSERT}(tx_id, ${EVENT}) VALUES ('1', ${values('f2')})`,
    ],
    [
      'an event with its own stored time',
      `${INSERT}(created_at, ${EVENT}) VALUES ('infinity', ${values('f3')})`,
    ],
    [
      'an event on the channel of another env',
      `${INSERT}(${EVENT}) VALUES ('${RC}', 'o1', 't', '{}', now())`,
    ],
    [
      'an event stamped with another env',
      `${INSERT}(${EVENT}, source_env) VALUES (${values('f4')}, 'rc')`,
    ],
  ])('the publisher cannot write %s', async (_, statement) => {
    await expect(publisher.query(statement)).rejects.toMatchObject({ code: '42501' });
  });

  it("reads its own channel's events only, and publishes through PostgresBus to no other stack or env", async () => {
    const elsewhere = busChannel('other-stack', null);
    const hidden = `${INSERT}(${EVENT}, source_stack) VALUES ($1, 'hidden', 't', '{}', now(), 'other-stack')`;
    await database.db.query(hidden, [elsewhere]);
    const seen = await publisher.query(`SELECT DISTINCT channel FROM cyclium_events`);
    expect(seen.rows).toEqual([{ channel: busChannel(null, null) }]);
    const stray = new PostgresBus(
      publisher,
      () => ({ connectionString: as(database.url, ROLES.publisher) }),
      {
        channel: elsewhere,
        stackSlug: 'other-stack',
      },
    );
    await expect(stray.publish('test.x', { n: 2 })).rejects.toMatchObject({ code: '42501' });
  });

  it('a publisher granted a stack and env publishes to their channel, and to no other', async () => {
    const pool = new pg.Pool({ connectionString: as(database.url, SCOPED.role), max: 1 });
    pool.on('error', () => undefined);
    try {
      const config = () => ({ connectionString: as(database.url, SCOPED.role) });
      const channel = busChannel('billing', 'rc');
      const own = new PostgresBus(pool, config, { channel, stackSlug: 'billing', env: 'rc' });
      const event = await own.publish('test.x', { n: 3 });
      const stamp = `SELECT channel, source_stack, source_env FROM cyclium_events WHERE event_id = $1`;
      const stored = await database.db.query(stamp, [event.eventId]);
      expect(stored.rows).toEqual([{ channel, source_stack: 'billing', source_env: 'rc' }]);
      const defaults = new PostgresBus(pool, config, { channel: busChannel(null, null) });
      await expect(defaults.publish('test.x', { n: 4 })).rejects.toMatchObject({ code: '42501' });
    } finally {
      await pool.end();
    }
  });

  it('the reader reads every table and writes none', async () => {
    const { rows } = await reader.query(
      `SELECT (SELECT count(*) FROM cyclium_episodes)::int AS episodes, (SELECT count(*) FROM cyclium_nodes)::int AS nodes`,
    );
    expect(rows[0].episodes).toBeGreaterThan(0);
    expect(rows[0].nodes).toBeGreaterThan(0);
    // Every channel's events: the publisher's narrowing is its own.
    const channels = await reader.query(
      `SELECT count(DISTINCT channel)::int AS n FROM cyclium_events`,
    );
    expect(channels.rows[0].n).toBeGreaterThan(1);
    await expect(reader.query(`UPDATE cyclium_nodes SET mode = 'disabled'`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(
      reader.query(
        `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at) VALUES ('c', 'e', 't', '{}', now())`,
      ),
    ).rejects.toMatchObject({
      code: '42501',
    });
  });
});
