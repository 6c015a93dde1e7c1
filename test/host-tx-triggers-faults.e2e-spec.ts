/**
 * Triggers in the host's transaction under faults, on real node processes of
 * test/fixtures/tx-node.ts: `POST /orders/:id` inserts the order and triggers its `shipper.ship`
 * episode in one host transaction. While a few such calls are always in flight, a fault proxy cuts
 * every connection of one node 200 times at random instants (before, during and after a COMMIT and
 * its reply), and another node is `kill -9`-ed again and again. Afterwards every committed order
 * has exactly one episode, which ran to `done`, no episode exists without its order, and no trigger
 * request is left pending. A direct node (no proxy, never killed) is up throughout.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

const TX_NODE = fileURLToPath(new URL('./fixtures/dist/tx-node.js', import.meta.url));
/** Faults of the proxied node's connections: cuts of all of them, or a COMMIT's reply lost. */
const FAULTS = 200;
const KILLS = 15;

/** The last message of a reply: ReadyForQuery ('Z', length 5, status), after the COMMIT. */
function endsWithReadyForQuery(chunk: Buffer): boolean {
  const at = chunk.length - 6;
  return at >= 0 && chunk[at] === 0x5a && chunk.readInt32BE(at + 1) === 5;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const between = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));

function startTxNode(url: string, id: string): Promise<DemoNode> {
  return startNodeProcess(TX_NODE, url, {
    env: { CYCLIUM_NODE_ID: id },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

/** What the order loop saw: ids answered 201, and calls that failed (an error status or none). */
interface LoopTally {
  answered: Set<string>;
  failed: number;
}

/**
 * `inFlight` workers (each resting up to `restMs` between calls) posting new orders
 * (`<prefix>-<n>`) to `target()` until `stop()` says so;
 * a call that fails is counted, never retried (its order may or may not have committed).
 */
function orderLoop(
  prefix: string,
  target: () => DemoNode,
  stop: () => boolean,
  { inFlight, restMs }: { inFlight: number; restMs: number },
) {
  const tally: LoopTally = { answered: new Set(), failed: 0 };
  let next = 0;
  const worker = async () => {
    while (!stop()) {
      const id = `${prefix}-${next++}`;
      try {
        const response = await fetch(`http://127.0.0.1:${target().port}/orders/${id}`, {
          method: 'POST',
          signal: AbortSignal.timeout(10_000),
        });
        await response.arrayBuffer();
        if (response.status === 201) tally.answered.add(id);
        else tally.failed++;
      } catch {
        tally.failed++;
      }
      if (restMs > 0) await pause(between(0, restMs));
    }
  };
  const done = Promise.all(Array.from({ length: inFlight }, worker));
  return { tally, done, calls: () => next };
}

describe('triggers in the host transaction under cut connections and kill -9', () => {
  const database = useDatabase(3);
  let proxy: TcpProxy | undefined;
  /** The node whose connections go through the proxy (the first case's), booted with the direct one. */
  let proxied: DemoNode | undefined;
  /** Set in afterAll: every order loop stops, even one whose test failed half way. */
  let stopped = false;
  const nodes = new Set<DemoNode>();
  /** Boots under way: afterAll waits for them, so a node that comes up late is stopped too. */
  const booting = new Set<Promise<DemoNode>>();
  /** Proxied connections inside an order's transaction (INSERT INTO orders sent, no COMMIT yet). */
  const ordering = new Set<number>();
  /** Connections whose COMMIT went through and whose reply the proxy drops, then cuts. */
  const losing = new Set<number>();
  let dropNextCommitReply = false;
  let commitRepliesDropped = 0;

  const start = (url: string, id: string): Promise<DemoNode> => {
    const boot = startTxNode(url, id).then((node) => {
      nodes.add(node);
      return node;
    });
    booting.add(boot);
    void boot.finally(() => booting.delete(boot)).catch(() => undefined);
    return boot;
  };

  beforeAll(async () => {
    await database.db.query(`CREATE TABLE orders (id text PRIMARY KEY)`);
    await database.db.query(`CREATE TABLE ledger (order_id text NOT NULL, episode_id uuid)`);
    await database.db.query(`CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL)`);
    await database.db.query(`INSERT INTO counters (name, n) VALUES ('booked', 0)`);
    proxy = await TcpProxy.start({
      target: database.url,
      onClientData: (chunk, connection) => {
        if (chunk.includes('INSERT INTO orders')) ordering.add(connection.id);
        else if (ordering.has(connection.id) && chunk.includes('COMMIT')) {
          ordering.delete(connection.id);
          if (dropNextCommitReply) {
            dropNextCommitReply = false;
            losing.add(connection.id);
            commitRepliesDropped++;
          }
        }
        return 'forward';
      },
      onServerData: (chunk, connection) => {
        if (!losing.has(connection.id)) return 'forward';
        if (!endsWithReadyForQuery(chunk)) return 'drop';
        losing.delete(connection.id);
        return 'drop-and-close';
      },
    });
    // Up throughout, direct: it runs episodes whatever happens to the node under faults. The
    // proxied one boots beside it; nothing is cut before the first case begins.
    [, proxied] = await Promise.all([
      start(database.url, 'tx-direct'),
      start(proxy.url(database.url), 'tx-proxied'),
    ]);
  }, 60_000);

  afterAll(async () => {
    stopped = true;
    await Promise.allSettled([...booting]);
    await Promise.all([...nodes].map((node) => node.stop('SIGKILL')));
    await proxy?.close();
  });

  /** The invariants over every order and every `shipper.ship` episode, once all have ended. */
  async function expectOneDoneEpisodePerOrder(): Promise<{ orders: number }> {
    await waitFor(
      'every shipper.ship episode to end',
      async () => {
        const { rows } = await database.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclium_episodes
            WHERE actor_id = 'shipper' AND expectation_id = 'ship'
              AND status IN ('deferred', 'running', 'queued')`,
        );
        return rows[0]?.n === 0;
      },
      45_000,
      250,
    );
    const { rows } = await database.db.query<{
      orders: number;
      without_episode: string[] | null;
      doubled: string[] | null;
      orphans: string[] | null;
      not_done: string[] | null;
      pending_requests: number;
    }>(
      `WITH ship AS (
         SELECT id, status, trigger_ref->'payload'->>'orderId' AS order_id FROM cyclium_episodes
          WHERE actor_id = 'shipper' AND expectation_id = 'ship')
       SELECT (SELECT count(*)::int FROM orders) AS orders,
              (SELECT array_agg(o.id) FROM orders o
                WHERE NOT EXISTS (SELECT 1 FROM ship s WHERE s.order_id = o.id)) AS without_episode,
              (SELECT array_agg(order_id) FROM (SELECT order_id FROM ship GROUP BY order_id
                HAVING count(*) > 1) d) AS doubled,
              (SELECT array_agg(s.id || ' ' || coalesce(s.order_id, '?')) FROM ship s
                WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = s.order_id)) AS orphans,
              (SELECT array_agg(s.id || ' ' || s.status) FROM ship s
                WHERE s.status <> 'done') AS not_done,
              (SELECT count(*)::int FROM cyclium_trigger_requests
                WHERE status = 'pending') AS pending_requests`,
    );
    expect(rows[0]).toEqual({
      orders: rows[0]?.orders,
      without_episode: null,
      doubled: null,
      orphans: null,
      not_done: null,
      pending_requests: 0,
    });
    return { orders: rows[0]?.orders ?? 0 };
  }

  async function committed(prefix: string): Promise<Set<string>> {
    const { rows } = await database.db.query<{ id: string }>(
      `SELECT id FROM orders WHERE id LIKE $1`,
      [`${prefix}-%`],
    );
    return new Set(rows.map((row) => row.id));
  }

  it(`the proxy cuts the ordering node's connections ${FAULTS} times`, async () => {
    if (!proxy || !proxied) throw new Error('no proxy');
    const node = proxied;
    let cutting = true;
    const loop = orderLoop(
      'cut',
      () => node,
      () => stopped || !cutting,
      {
        inFlight: 4,
        restMs: 0,
      },
    );
    const began = Date.now();
    let cuts = 0;
    let commitFaults = 0;
    try {
      // Every third fault drops the reply to the next order's COMMIT (the server committed, the
      // node never hears it); the others cut every connection at a random instant.
      for (let fault = 0; fault < FAULTS; fault++) {
        await pause(between(3, 40));
        if (fault % 3 === 2) {
          const before = commitRepliesDropped;
          dropNextCommitReply = true;
          const fired = await waitFor('', () => commitRepliesDropped > before, 1_000, 2).then(
            () => true,
            () => false,
          );
          dropNextCommitReply = false;
          if (fired) {
            commitFaults++;
            continue;
          }
        }
        proxy.dropAll();
        cuts++;
      }
    } finally {
      cutting = false;
      await loop.done;
    }
    const faulted = Date.now() - began;
    // The node still works once the faults stop: one more order goes through.
    const after = await fetch(`http://127.0.0.1:${node.port}/orders/cut-after`, {
      method: 'POST',
    });
    expect(after.status).toBe(201);

    const { orders } = await expectOneDoneEpisodePerOrder();
    const rows = await committed('cut');
    const answerLost = [...rows].filter((id) => id !== 'cut-after' && !loop.tally.answered.has(id));
    // Every 201 was committed; the faults were real: calls failed.
    expect([...loop.tally.answered].filter((id) => !rows.has(id))).toEqual([]);
    expect(loop.tally.failed).toBeGreaterThan(0);
    expect(loop.tally.answered.size).toBeGreaterThan(0);
    // A COMMIT whose reply was dropped committed: its order is there, its call failed.
    expect(commitFaults).toBeGreaterThan(0);
    expect(answerLost.length).toBeGreaterThan(0);
    console.log(
      `proxy part: ${cuts} cuts of every connection, ${commitFaults} COMMIT replies dropped, ` +
        `${loop.calls()} calls, ${loop.tally.answered.size} answered 201, ` +
        `${loop.tally.failed} failed, ${rows.size - 1} orders committed in the loop ` +
        `(${answerLost.length} of them with the answer lost), ${orders} orders in all; faults ` +
        `${faulted} ms, ${Date.now() - began} ms with the checks`,
    );
  }, 90_000);

  it(`kill -9 of the ordering node ${KILLS} times, a new one taking over each time`, async () => {
    const began = Date.now();
    const answered = new Set<string>();
    let calls = 0;
    let failed = 0;
    let kills = 0;
    let current = await start(database.url, 'tx-killed-0');
    while (kills < KILLS && !stopped) {
      // The next node boots while orders go to this one, which is killed at a random instant
      // with calls in flight. The loop runs only around the kill: a loop running through every
      // boot would take the CPU the boots need, and one call in flight is enough for a kill to
      // land inside a transaction.
      const next = start(database.url, `tx-killed-${kills + 1}`);
      let ordering = true;
      const loop = orderLoop(
        `kill-${kills}`,
        () => current,
        () => stopped || !ordering,
        {
          inFlight: 3,
          restMs: 10,
        },
      );
      try {
        await pause(between(100, 700));
        await current.stop('SIGKILL');
        kills++;
        nodes.delete(current);
      } finally {
        ordering = false;
        await loop.done;
      }
      calls += loop.calls();
      failed += loop.tally.failed;
      for (const id of loop.tally.answered) answered.add(id);
      current = await next;
    }
    const killed = Date.now() - began;

    const { orders } = await expectOneDoneEpisodePerOrder();
    const rows = await committed('kill');
    const answerLost = [...rows].filter((id) => !answered.has(id));
    // Every 201 was committed; the kills were real: calls in flight failed.
    expect([...answered].filter((id) => !rows.has(id))).toEqual([]);
    expect(failed).toBeGreaterThan(0);
    expect(answered.size).toBeGreaterThan(0);
    console.log(
      `kill part: ${kills} kills (${killed} ms), ${calls} calls, ${answered.size} answered 201, ` +
        `${failed} failed, ${rows.size} orders committed (${answerLost.length} of them with the ` +
        `answer lost), ${orders} orders in all; ${Date.now() - began} ms with the checks`,
    );
    // Sixteen boots one after another, each with its own 30 s deadline: at a load average of 11 a
    // fresh clone's CI took more than 120 s over them.
  }, 240_000);
});
