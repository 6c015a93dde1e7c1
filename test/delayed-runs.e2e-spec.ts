import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  episodeRow,
  journal,
  sideEffects,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const POLL_MS = 1_000;
const DELAY_MS = 3_000;
/** The poll's own transaction and a loaded machine's timer lag, on top of one poll interval. */
const SLACK_MS = 500;
/** Short, so the whole-cluster stop outlasts it: a run for later must not expire however long it waited. */
const TTL_MS = 2_000;

interface Triggered {
  status: string;
  episodeId: string | null;
  notBefore?: string;
}

/**
 * Runs for later, across real node processes: a trigger with `delayMs` (or `runAt`) is a deferred
 * row with its trigger request due then. It starts no earlier than due, and no later than one poll
 * interval after, on the node that triggered it or, that node killed, on another; canceled before
 * then it never starts. Times are the database's (queued_at at the trigger, started_at at the start).
 */
describe('delayed runs', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_TRIGGER_POLL_MS: String(POLL_MS),
    DEMO_TRIGGER_TTL_MS: String(TTL_MS),
  };
  let a: DemoNode;
  let b: DemoNode;
  let c: DemoNode | undefined;

  beforeAll(async () => {
    [a, b] = await Promise.all([
      startNode(database.url, 'delay-a', env),
      startNode(database.url, 'delay-b', env),
    ]);
  });

  afterAll(async () => {
    await Promise.all([a, b, c].map((node) => node?.stop('SIGKILL') ?? Promise.resolve()));
  });

  async function trigger(
    node: DemoNode,
    body: Record<string, unknown>,
  ): Promise<{ status: number; body: Triggered & { message?: string; field?: string } }> {
    const response = await fetch(
      `http://127.0.0.1:${node.port}/actors/resource_rebalancer/rebalance`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      },
    );
    return {
      status: response.status,
      body: (await response.json()) as Triggered & { message?: string; field?: string },
    };
  }

  async function deferred(node: DemoNode, body: Record<string, unknown>): Promise<string> {
    const answer = await trigger(node, body);
    expect(answer.status).toBe(202);
    expect(answer.body.status).toBe('deferred');
    expect(answer.body.notBefore).toEqual(expect.any(String));
    return answer.body.episodeId as string;
  }

  /** Milliseconds from the trigger to the start, by the database clock. */
  async function waited(id: string): Promise<number> {
    const { rows } = await database.db.query<{ ms: number }>(
      `SELECT (extract(epoch FROM started_at - queued_at) * 1000)::float8 AS ms FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    return rows[0]?.ms as number;
  }

  it(`starts a run with delayMs ${DELAY_MS} no earlier than that and within one poll interval after`, async () => {
    const id = await deferred(a, {
      payload: { resource: 'later-1', stepMs: 10 },
      delayMs: DELAY_MS,
    });
    expect((await episodeRow(database.db, id)).status).toBe('deferred');
    await waitForStatus(database.db, id, 'done', 20_000);
    const ms = await waited(id);
    expect(ms).toBeGreaterThanOrEqual(DELAY_MS);
    expect(ms).toBeLessThanOrEqual(DELAY_MS + POLL_MS + SLACK_MS);
    expect(
      (await journal(database.db, id)).filter((j) => j.kind === 'step').length,
    ).toBeGreaterThan(0);
  });

  it('starts it on another node when the one that took the trigger is killed before it is due', async () => {
    const id = await deferred(a, {
      payload: { resource: 'later-2', stepMs: 10 },
      delayMs: DELAY_MS,
    });
    await a.stop('SIGKILL');
    const row = await waitForStatus(database.db, id, 'done', 20_000);
    expect(row.owner_node).toBe('delay-b');
    const ms = await waited(id);
    expect(ms).toBeGreaterThanOrEqual(DELAY_MS);
    expect(ms).toBeLessThanOrEqual(DELAY_MS + POLL_MS + SLACK_MS);
  });

  it('starts a run at its runAt, and never starts one canceled before its time', async () => {
    const at = new Date(Date.now() + 2_000);
    const timed = await deferred(b, {
      payload: { resource: 'at-1', stepMs: 10 },
      runAt: at.toISOString(),
    });
    const canceled = await deferred(b, {
      payload: { resource: 'later-3', stepMs: 10 },
      delayMs: 1_500,
    });
    const cancel = await fetch(`http://127.0.0.1:${b.port}/ops/api/episodes/${canceled}/cancel`, {
      method: 'POST',
      headers: { 'x-cyclium-ops': '1' },
    });
    expect(cancel.status).toBe(200);
    expect(((await cancel.json()) as { result: string }).result).toBe('canceled');

    const row = await waitForStatus(database.db, timed, 'done', 20_000);
    expect((row.started_at as Date).getTime()).toBeGreaterThanOrEqual(at.getTime() - 50); // the two clocks, on one machine
    // Its request fell due and was taken by a poll, which found nothing to run.
    await waitFor('the canceled run’s request to be taken', async () => {
      const { rows } = await database.db.query(
        `SELECT status, error FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [canceled],
      );
      return rows[0]?.status === 'completed' ? rows[0] : undefined;
    });
    const after = await episodeRow(database.db, canceled);
    expect(after.status).toBe('canceled');
    expect(after.started_at).toBeNull();
    expect(await journal(database.db, canceled)).toEqual([]);
  });

  it('answers 400 for a delay it cannot honour, naming the field, and writes nothing', async () => {
    const before = (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_episodes`))
      .rows[0].n as number;
    for (const [body, field] of [
      [{ payload: { resource: 'bad' }, delayMs: -1 }, undefined],
      [{ payload: { resource: 'bad' }, runAt: 'tomorrow' }, undefined],
      [{ payload: { resource: 'bad' }, delayMs: 10, runAt: new Date().toISOString() }, 'runAt'],
    ] as const) {
      const answer = await trigger(b, body);
      expect(answer.status).toBe(400);
      if (field) expect(answer.body.field).toBe(field);
    }
    expect(
      (await database.db.query(`SELECT count(*)::int AS n FROM cyclium_episodes`)).rows[0].n,
    ).toBe(before);
  });

  it('loses nothing to a whole-cluster stop that outlasts its due time by more than the request TTL: the next node to boot starts it, each step once', async () => {
    const id = await deferred(b, {
      payload: { resource: 'later-4', stepMs: 10 },
      delayMs: DELAY_MS,
    });
    await b.stop('SIGKILL'); // delay-a is down since the second test: no node is left
    await waitFor(
      'the run to be overdue by more than the TTL with no node up',
      async () =>
        (
          await database.db.query(
            `SELECT now() >= queued_at + make_interval(secs => $2) AS due FROM cyclium_episodes WHERE id = $1`,
            [id, (DELAY_MS + TTL_MS + 500) / 1000],
          )
        ).rows[0].due === true,
      DELAY_MS + TTL_MS + 5_000,
      100,
    );
    expect((await episodeRow(database.db, id)).status).toBe('deferred');
    c = await startNode(database.url, 'delay-c', env);
    const row = await waitForStatus(database.db, id, 'done', 20_000);
    expect(row.owner_node).toBe('delay-c');
    expect(await waited(id)).toBeGreaterThanOrEqual(DELAY_MS);
    expect(await sideEffects(database.db, id)).toEqual({
      plan: 1,
      drain: 1,
      move: 1,
      verify: 1,
      report: 1,
    });
  });
});
