import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startAll, startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const TX_NODE = fileURLToPath(new URL('./fixtures/dist/tx-node.js', import.meta.url));
const EPISODES = 100;
const KILLS = 8;

function startTxNode(url: string, id: string, env: Record<string, string> = {}): Promise<DemoNode> {
  return startNodeProcess(TX_NODE, url, {
    env: { CYCLIUM_NODE_ID: id, ...env },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

async function book(node: DemoNode, orderId: string): Promise<string | null> {
  try {
    const response = await fetch(`http://127.0.0.1:${node.port}/book/${orderId}`, {
      method: 'POST',
    });
    const body = (await response.json()) as { status: string; episodeId: string | null };
    return response.status === 202 ? body.episodeId : null;
  } catch {
    return null; // the node died under the call
  }
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Transaction steps (`ep.transaction`) against real node processes that die: a step that inserts
 * a ledger row and increments a counter commits those writes with its journal row and checkpoint,
 * or not at all. Nodes are `kill -9`-ed at random instants across 100 episodes (before, inside and
 * after the step's transaction); a `SIGSTOP`-ed holder whose claim was taken over fails on the fence
 * after `SIGCONT`, its writes rolled back.
 */
describe('transaction steps under kill -9 and SIGSTOP', () => {
  const database = useDatabase(3);
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    await database.db.query(`CREATE TABLE orders (id text PRIMARY KEY)`);
    await database.db.query(`CREATE TABLE ledger (order_id text NOT NULL, episode_id uuid)`);
    await database.db.query(`CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL)`);
    await database.db.query(`INSERT INTO counters VALUES ('booked', 0)`);
  });

  afterAll(async () => {
    for (const node of nodes) node.process.kill('SIGCONT');
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const start = async (id: string, env: Record<string, string>) => {
    const node = await startTxNode(database.url, id, env);
    nodes.push(node);
    return node;
  };
  const scalar = async (sql: string, params: unknown[] = []) =>
    (await database.db.query<{ v: string | number | null }>(sql, params)).rows[0]?.v;
  /** Open transactions that wrote the ledger (their row locks on it). */
  const ledgerWriters = async () =>
    Number(
      await scalar(
        `SELECT count(*) AS v FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
          WHERE c.relname = 'ledger' AND l.mode = 'RowExclusiveLock'`,
      ),
    );

  it('kill -9 at random instants across 100 episodes: the counter equals the episodes done, no row doubled', async () => {
    const env = { TX_HOLD_MS: '60', TX_AFTER_MS: '100', TX_LEASE_SECONDS: '3' };
    const live = await startAll([start('step-a', env), start('step-b', env)]);
    let kills = 0;
    try {
      // Each call books a new order: a call whose answer died with its node may have started its
      // episode, so the episodes are counted in the database, not by the answers.
      let calls = 0;
      let answered = 0;
      const triggering = (async () => {
        while (answered < EPISODES) {
          const node = live[calls % live.length] as DemoNode;
          if (await book(node, `k-${calls++}`)) answered++;
          // Spread over the kills, so they land before, inside and after steps' transactions.
          await pause(110);
        }
      })();
      while (kills < KILLS) {
        await pause(150 + Math.random() * 450);
        const at = Math.floor(Math.random() * live.length);
        await (live[at] as DemoNode).stop('SIGKILL');
        kills++;
        live[at] = await start(`step-${kills}-${at}`, env);
      }
      await triggering;
      await waitFor(
        'every book episode to end',
        async () =>
          Number(
            await scalar(
              `SELECT count(*) AS v FROM cyclium_episodes WHERE expectation_id = 'book'
                  AND status NOT IN ('done', 'failed', 'partially_failed', 'canceled')`,
            ),
          ) === 0,
        90_000,
        250,
      );
    } finally {
      await Promise.all(live.map((node) => node.stop('SIGKILL')));
    }
    const episodes = Number(
      await scalar(`SELECT count(*) AS v FROM cyclium_episodes WHERE expectation_id = 'book'`),
    );
    const done = Number(
      await scalar(
        `SELECT count(*) AS v FROM cyclium_episodes WHERE expectation_id = 'book' AND status = 'done'`,
      ),
    );
    const counter = Number(await scalar(`SELECT n AS v FROM counters WHERE name = 'booked'`));
    const rows = Number(await scalar(`SELECT count(*) AS v FROM ledger`));
    const doubled = await database.db.query(
      `SELECT order_id FROM ledger GROUP BY order_id HAVING count(*) > 1`,
    );
    const journaled = Number(
      await scalar(
        `SELECT count(*) AS v FROM cyclium_episode_steps WHERE kind = 'step' AND name = 'book'`,
      ),
    );
    const restarted = Number(
      await scalar(
        `SELECT count(DISTINCT episode_id) AS v FROM cyclium_episode_steps
          WHERE kind = 'observation' AND name IN ('resumed', 'interrupted', 'orphaned')`,
      ),
    );
    console.log(
      `transaction steps under kill -9: ${episodes} episodes, ${done} done, ${kills} kills, ` +
        `${restarted} episodes restarted, counter ${counter}, ledger rows ${rows}, ` +
        `book steps journaled ${journaled}`,
    );
    expect(episodes).toBeGreaterThanOrEqual(EPISODES);
    expect(done).toBe(episodes);
    expect(counter).toBe(done);
    expect(rows).toBe(done);
    expect(journaled).toBe(done);
    expect(doubled.rows).toEqual([]);
    // Every done episode has its one row, written by the attempt whose step was journaled.
    const missing = await database.db.query(
      `SELECT e.id FROM cyclium_episodes e WHERE e.expectation_id = 'book' AND e.status = 'done'
          AND (SELECT count(*) FROM ledger l WHERE l.episode_id = e.id) <> 1`,
    );
    expect(missing.rows).toEqual([]);
    // The kills hit running episodes.
    expect(restarted).toBeGreaterThanOrEqual(KILLS / 2);
    // Ten node boots in a row (two, then one after each kill), each with its own deadline, and the
    // 90 s wait for the episodes: 60 s is too short a backstop when the machine is loaded.
  }, 240_000);

  it("a SIGSTOP-ed holder's transaction step fails on the fence after SIGCONT: its writes are absent", async () => {
    const before = Number(await scalar(`SELECT n AS v FROM counters WHERE name = 'booked'`));
    // The holder sits 3 s inside its transaction before and after its writes: longer than its lease.
    const [holder, taker] = await startAll([
      start('stop-holder', { TX_HOLD_MS: '3000', TX_LEASE_SECONDS: '2' }),
      start('stop-taker', { TX_HOLD_MS: '0', TX_LEASE_SECONDS: '2' }),
    ]);
    // Claimed, or already done: with no hold of its own the taker can finish between two polls.
    const claimOwner = () =>
      scalar(
        `SELECT owner_node AS v FROM cyclium_work_claims
          WHERE dedupe_key = 'episode:' || $1 AND state IN ('claimed', 'done')`,
        [episodeId],
      );
    const episodeId = await book(holder, 'stopped-1');
    if (!episodeId) throw new Error('not started');
    // Its writes are in: the holder's open transaction holds the ledger row's insert.
    await waitFor(
      'the holder inside its transaction, after its writes',
      async () => (await ledgerWriters()) > 0,
      15_000,
      20,
    );
    holder.process.kill('SIGSTOP');
    try {
      await waitFor(
        'the taker to own the claim',
        async () => (await claimOwner()) === 'stop-taker',
        20_000,
        100,
      );
    } catch (error) {
      const state = await database.db.query(
        `SELECT e.status, e.phase, e.owner_node, e.updated_at, clock_timestamp() AS now,
                c.owner_node AS claim_owner, c.state, c.lease_until, c.fence
           FROM cyclium_episodes e LEFT JOIN cyclium_work_claims c
             ON c.dedupe_key = 'episode:' || e.id WHERE e.id = $1`,
        [episodeId],
      );
      const nodes = await database.db.query(
        `SELECT node_identity, last_seen_at FROM cyclium_nodes`,
      );
      console.log(
        JSON.stringify({ state: state.rows, nodes: nodes.rows }),
        taker.output().slice(-3000),
      );
      throw error;
    } finally {
      holder.process.kill('SIGCONT');
    }
    await waitFor(
      'the episode done on the taker',
      async () =>
        (await scalar(
          `SELECT status || '@' || owner_node AS v FROM cyclium_episodes WHERE id = $1`,
          [episodeId],
        )) === 'done@stop-taker',
      30_000,
      100,
    );
    expect(
      Number(await scalar(`SELECT count(*) AS v FROM ledger WHERE episode_id = $1`, [episodeId])),
    ).toBe(1);
    expect(Number(await scalar(`SELECT n AS v FROM counters WHERE name = 'booked'`))).toBe(
      before + 1,
    );
    // Nothing of the holder's transaction is left open or committed later.
    await waitFor(
      'no open transaction writing the ledger',
      async () => (await ledgerWriters()) === 0,
      15_000,
    );
    expect(
      Number(await scalar(`SELECT count(*) AS v FROM ledger WHERE episode_id = $1`, [episodeId])),
    ).toBe(1);
  }, 120_000);
});
