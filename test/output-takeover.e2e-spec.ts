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

  const start = async (id: string) => {
    const node = await startNodeProcess(OUTPUT_NODE, database.url, {
      env: { NODE_ID: id, DELIVERY_TIMEOUT_MS: '3000' },
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

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('kill -9 inside a slow adapter: the other node delivers it once, with the same idempotency key', async () => {
    const [a] = await Promise.all([start('out-node-a'), start('out-node-b')]);
    const response = await fetch(`http://127.0.0.1:${a.port}/emit`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'takeover', slowOn: 'out-node-a', ms: 60_000 }),
    });
    expect(await response.json()).toEqual({ status: 'started' });

    const log = async () => (await database.db.query<LogRow>(`SELECT * FROM output_node_log ORDER BY id`)).rows;
    await waitFor('node a to be inside the adapter', async () => (await log()).some((r) => r.node === 'out-node-a' && r.phase === 'started'));
    const leased = (await database.db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'takeover'`)).rows[0];
    expect(leased).toMatchObject({ status: 'pending', attempts: 1, lease_owner: 'out-node-a' });
    await a.stop('SIGKILL');

    const delivered = await waitFor(
      'node b to deliver the output',
      async () => {
        const row = (await database.db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'takeover'`)).rows[0];
        return row.status === 'delivered' ? row : undefined;
      },
      20_000,
      100,
    );
    expect(delivered).toMatchObject({ attempts: 2, lease_owner: null, delivered_ref: { node: 'out-node-b' } });
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
});
