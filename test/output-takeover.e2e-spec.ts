import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const OUTPUT_NODE = fileURLToPath(new URL('./fixtures/dist/output-node.js', import.meta.url));

interface LogRow {
  node: string;
  output_id: string;
  idempotency_key: string;
  attempt: number;
  phase: string;
  at: Date;
}

/**
 * Real node processes (the compiled fixture), claims off: the node that converged an output is
 * `kill -9`-ed inside its slow adapter, and the output still gets delivered — by the other node,
 * once, with the same idempotency key — when the dead node's lease on the row runs out.
 */
describe('an output whose delivering node is killed is delivered by a peer', () => {
  const database = useDatabase(2);
  const nodes: DemoNode[] = [];

  const start = async (
    id: string,
    place: { CYCLIUM_ENV?: string; CYCLIUM_STACK_SLUG?: string } = {},
  ) => {
    const node = await startNodeProcess(OUTPUT_NODE, database.url, {
      env: { NODE_ID: id, DELIVERY_TIMEOUT_MS: '3000', ...place },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    nodes.push(node);
    return node;
  };

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE output_node_log (
        id bigserial PRIMARY KEY, node text NOT NULL, output_id uuid NOT NULL, idempotency_key text NOT NULL,
        attempt int NOT NULL, phase text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  });

  const emit = async (node: DemoNode, body: Record<string, unknown>) => {
    const response = await fetch(`http://127.0.0.1:${node.port}/emit`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(await response.json()).toEqual({ status: 'started' });
  };
  const log = async () =>
    (await database.db.query<LogRow>(`SELECT * FROM output_node_log ORDER BY id`)).rows;
  const output = async (key: string) => {
    const { rows } = await database.db.query(
      `SELECT * FROM cyclium_outputs WHERE dedupe_key = $1`,
      [key],
    );
    return rows[0];
  };

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('kill -9 inside a slow adapter: the other node delivers it once, with the same idempotency key', async () => {
    const [a] = await Promise.all([start('out-node-a'), start('out-node-b')]);
    await emit(a, { key: 'takeover', slowOn: 'out-node-a', ms: 60_000 });

    await waitFor('node a to be inside the adapter', async () =>
      (await log()).some((r) => r.node === 'out-node-a' && r.phase === 'started'),
    );
    const leased = (
      await database.db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'takeover'`)
    ).rows[0];
    expect(leased).toMatchObject({ status: 'pending', attempts: 1, lease_owner: 'out-node-a' });
    await a.stop('SIGKILL');

    const delivered = await waitFor(
      'node b to deliver the output',
      async () => {
        const row = (
          await database.db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'takeover'`)
        ).rows[0];
        return row.status === 'delivered' ? row : undefined;
      },
      20_000,
      100,
    );
    expect(delivered).toMatchObject({
      attempts: 2,
      lease_owner: null,
      delivered_ref: { node: 'out-node-b' },
    });
    expect((await log()).map((r) => [r.node, r.idempotency_key, r.attempt, r.phase])).toEqual([
      ['out-node-a', 'takeover', 1, 'started'],
      ['out-node-b', 'takeover', 2, 'started'],
      ['out-node-b', 'takeover', 2, 'finished'],
    ]);
    const rows = await log();
    expect(new Set(rows.map((r) => r.output_id))).toEqual(new Set([leased.id]));
    // b waited for a's lease (deliveryTimeoutMs + grace) to run out: never two deliveries at once.
    expect(rows[1].at.getTime() - rows[0].at.getTime()).toBeGreaterThanOrEqual(3_000);
  });

  it('a due output is delivered only by a node of its env and stack (not rc, stack s2, the default env)', async () => {
    const prod = await start('out-prod-1', { CYCLIUM_ENV: 'prod', CYCLIUM_STACK_SLUG: 's1' });
    // Bystanders, each up before the row falls due: another env, another stack, and out-node-b of
    // the first test (the default env, no stack) when it runs.
    await Promise.all([
      start('out-rc', { CYCLIUM_ENV: 'rc', CYCLIUM_STACK_SLUG: 's1' }),
      start('out-other-stack', { CYCLIUM_ENV: 'prod', CYCLIUM_STACK_SLUG: 's2' }),
    ]);
    await emit(prod, { key: 'scoped', slowOn: 'out-prod-1', ms: 60_000 });
    const inside = async () => (await log()).some((r) => r.node === 'out-prod-1');
    await waitFor('out-prod-1 to be inside the adapter', inside);
    const leased = { status: 'pending', attempts: 1, lease_owner: 'out-prod-1' };
    expect(await output('scoped:prod')).toMatchObject({
      ...leased,
      source_env: 'prod',
      source_stack: 's1',
    });
    await prod.stop('SIGKILL');

    // The lease runs out (deliveryTimeoutMs + 1 s); every other live node then beats (each beat asks
    // whether a row of its scope is due, and takes it) for a full second past that.
    await waitFor(
      'every other node to beat a second past the due time',
      async () => {
        const { rows } = await database.db.query(
          `SELECT bool_and(n.last_seen_at > o.next_attempt_at + interval '1 second') AS past
             FROM cyclium_nodes n, cyclium_outputs o
            WHERE o.dedupe_key = 'scoped:prod' AND n.node_identity IN ('out-rc', 'out-other-stack', 'out-node-b')`,
        );
        return rows[0].past === true;
      },
      20_000,
      100,
    );
    expect(await output('scoped:prod')).toMatchObject(leased);
    expect(
      (await log()).filter((r) => r.idempotency_key === 'scoped:prod').map((r) => r.node),
    ).toEqual(['out-prod-1']);

    await start('out-prod-2', { CYCLIUM_ENV: 'prod', CYCLIUM_STACK_SLUG: 's1' });
    const delivered = await waitFor(
      'a prod node of stack s1 to deliver it',
      async () =>
        (await output('scoped:prod')).status === 'delivered' ? output('scoped:prod') : undefined,
      20_000,
      100,
    );
    expect(delivered).toMatchObject({ attempts: 2, delivered_ref: { node: 'out-prod-2' } });
    expect(
      (await log())
        .filter((r) => r.idempotency_key === 'scoped:prod')
        .map((r) => [r.node, r.phase]),
    ).toEqual([
      ['out-prod-1', 'started'],
      ['out-prod-2', 'started'],
      ['out-prod-2', 'finished'],
    ]);
  }, 120_000);
});
