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
const ROLES = { worker: `cyc_worker_${suffix}`, publisher: `cyc_publisher_${suffix}`, reader: `cyc_reader_${suffix}` };

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
    for (const role of Object.values(ROLES)) await database.db.query(`CREATE ROLE ${role} LOGIN PASSWORD 'least-privilege'`);
    for (const statement of cycliumGrants(ROLES)) await database.db.query(statement);
    worker = await startBusNode(as(database.url, ROLES.worker), 'lp-worker', 'x');
    publisher = new pg.Pool({ connectionString: as(database.url, ROLES.publisher), max: 2 });
    reader = new pg.Pool({ connectionString: as(database.url, ROLES.reader), max: 1 });
    for (const p of [publisher, reader]) p.on('error', () => undefined);
    bus = new PostgresBus(publisher, () => ({ connectionString: as(database.url, ROLES.publisher) }), {
      channel: busChannel(null, null),
      publisher: () => 'lp-publisher',
    });
  }, 60_000);

  afterAll(async () => {
    await worker?.stop('SIGKILL');
    await publisher?.end();
    await reader?.end();
    for (const role of Object.values(ROLES)) {
      await database.db.query(`DROP OWNED BY ${role}`).catch(() => undefined);
      await database.db.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    }
  });

  it('a publisher-only service publishes events a worker node with the worker grants runs', async () => {
    const event = await bus.publish('test.x', { n: 1 });
    const ran = await waitFor('the episode of the event', async () => {
      const { rows } = await database.db.query(`SELECT status, owner_node FROM cyclium_episodes WHERE trigger_ref->>'eventId' = $1`, [event.eventId]);
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
    ['a checkpoint', `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state) VALUES (gen_random_uuid(), 1, 's1', '{}')`],
    ['a claim', `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until) VALUES ('k', 'claimed', 'p', now())`],
    ['a node row', `INSERT INTO cyclium_nodes (node_identity, mode, hostname, pid, version) VALUES ('forged', 'full', 'h', 1, 'v')`],
    ['a cancel request', `UPDATE cyclium_episodes SET cancel_requested_at = now()`],
    ['a workflow instance', `UPDATE cyclium_workflow_instances SET status = 'failed'`],
    ['an output', `INSERT INTO cyclium_outputs (episode_id, type, dedupe_key) VALUES (gen_random_uuid(), 't', 'k')`],
    ['the events of others', `DELETE FROM cyclium_events`],
  ])('the publisher cannot write %s', async (_, statement) => {
    await expect(publisher.query(statement)).rejects.toMatchObject({ code: '42501' });
  });

  it('the reader reads every table and writes none', async () => {
    const { rows } = await reader.query(`SELECT (SELECT count(*) FROM cyclium_episodes)::int AS episodes, (SELECT count(*) FROM cyclium_nodes)::int AS nodes`);
    expect(rows[0].episodes).toBeGreaterThan(0);
    expect(rows[0].nodes).toBeGreaterThan(0);
    await expect(reader.query(`UPDATE cyclium_nodes SET mode = 'disabled'`)).rejects.toMatchObject({ code: '42501' });
    await expect(
      reader.query(`INSERT INTO cyclium_events (channel, event_id, type, payload, published_at) VALUES ('c', 'e', 't', '{}', now())`),
    ).rejects.toMatchObject({
      code: '42501',
    });
  });
});
