import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';
import { startWriteNode, triggerWrite } from './support/write-node.js';

const STEPS = 5;

/**
 * Every connection of three nodes is cut (pg_terminate_backend) while twelve episodes are between
 * their steps and their ends (rule 12): the library's step and end writes that meet the cut are
 * sent again while their node still owns the episode, so no episode is recorded as the host's
 * crash, none is left for recovery, and no checkpointed step runs twice.
 */
describe('every connection is terminated under three nodes running twelve episodes', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    // The test's own pool loses its idle clients to the cuts too.
    database.db.on('error', () => undefined);
    nodes.push(
      ...(await Promise.all(
        ['cut-a', 'cut-b', 'cut-c'].map((id) => startWriteNode(database.url, id)),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  /** Terminates every other session of this database: the nodes' pools, renewals and LISTEN included. */
  const terminateAll = async (): Promise<number> =>
    (
      await database.db.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      )
    ).rows[0]?.n ?? 0;

  const stepsWritten = async (ids: string[]): Promise<number> =>
    (
      await database.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclium_episode_steps WHERE episode_id = ANY($1) AND kind = 'step'`,
        [ids],
      )
    ).rows[0]?.n ?? 0;

  it('keeps every node up and ends all twelve done, each step run once', async () => {
    const ids = await Promise.all(
      Array.from({ length: 12 }, (_, i) => triggerWrite(nodes[i % 3] as DemoNode)),
    );

    // Four cuts while the episodes run: after their first, second, third and last rounds of steps (their ends in flight).
    for (const round of [1, 2, 3, 5]) {
      await waitFor(
        `step round ${round} to be written`,
        async () => (await stepsWritten(ids)) >= 12 * round,
        15_000,
        20,
      );
      expect(await terminateAll()).toBeGreaterThan(0);
    }

    await waitFor(
      'all twelve episodes to end',
      async () =>
        (
          await database.db.query(
            `SELECT 1 FROM cyclium_episodes WHERE id = ANY($1) AND status <> 'running'`,
            [ids],
          )
        ).rowCount === 12,
      20_000,
      100,
    );
    const { rows } = await database.db.query<{
      id: string;
      status: string;
      error_class: string | null;
      steps: number;
    }>(
      `SELECT e.id, e.status, e.error_class,
              (SELECT count(*)::int FROM cyclium_episode_steps s WHERE s.episode_id = e.id AND s.kind = 'step') AS steps
         FROM cyclium_episodes e WHERE e.id = ANY($1)`,
      [ids],
    );
    expect(rows.filter((r) => r.status !== 'done')).toEqual([]);
    expect(rows.every((r) => r.steps === STEPS)).toBe(true);

    // Every node is up, and ran each step's function exactly once across the cluster.
    const effects = new Map<string, number>();
    for (const node of nodes) {
      expect(node.process.exitCode).toBeNull();
      for (const [key, n] of Object.entries(await node.get<Record<string, number>>('/effects')))
        effects.set(key, (effects.get(key) ?? 0) + n);
    }
    expect(effects.size).toBe(12 * STEPS);
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
  }, 120_000);
});
