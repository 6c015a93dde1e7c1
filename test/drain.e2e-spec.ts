import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  journal,
  rebalanceOn,
  startNode,
  stepsJournaled,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const SHUTDOWN_MS = 1500;
/** Staleness far beyond the test's horizon: only the drain's stamp can explain a prompt restart. */
const SLOW_STALENESS = {
  ...FAST_RECOVERY,
  DEMO_STALE_AFTER_MS: '60000',
  DEMO_SHUTDOWN_MS: String(SHUTDOWN_MS),
};

describe('graceful stop: SIGTERM a node with 5 running episodes', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(
        ['node-a', 'node-b', 'node-c'].map((id) => startNode(database.url, id, SLOW_STALENESS)),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('stamps all 5 interrupted before waiting out episodeShutdownMs, and peers restart them without waiting for staleness', async () => {
    const draining = nodes[0];
    const ids = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        rebalanceOn(draining, { resource: `r-${i}`, stepMs: 400, outputKey: `drain-${i}` }),
      ),
    );
    // This one sleeps through the abort for 3 s per step: longer than what is left of the shutdown window.
    const stubborn = await rebalanceOn(draining, {
      resource: 'stubborn',
      stepMs: 3000,
      ignoreAbortAtStep: 1,
      outputKey: 'drain-stubborn',
    });
    await waitFor('the four to be past their first step', async () =>
      (await Promise.all(ids.map((id) => stepsJournaled(database.db, id)))).every(
        (steps) => steps.length >= 1,
      ),
    );

    const exited = new Promise((resolve) => draining.process.once('exit', resolve));
    draining.process.kill('SIGTERM');
    // While the drain waits out its window for the stubborn step, a second SIGTERM arrives.
    await waitFor('the drain to stamp', async () =>
      (await journal(database.db, stubborn)).some((j) => j.name === 'interrupted'),
    );
    draining.process.kill('SIGTERM');
    await exited;
    const { rows } = await database.db.query(`SELECT clock_timestamp() AS at`);
    const exitedBy = rows[0].at as Date;
    // The second signal neither killed the drain early nor ran it again: the window closed on its
    // timeout with the stubborn step left behind (killed with the process)...
    expect(draining.output()).toContain('still mid-step');

    // ...and the stamp came first: one statement journaled every marker (one transaction id), at
    // least a whole window before the process was gone. Both are read off the database, so a
    // loaded machine only widens the gap, never closes it.
    const markers = await database.db.query<{ episode_id: string; xid: string; created_at: Date }>(
      `SELECT episode_id, xmin::text AS xid, created_at FROM cyclium_episode_steps WHERE episode_id = ANY($1) AND name = 'interrupted'`,
      [[...ids, stubborn]],
    );
    expect(markers.rows.map((m) => m.episode_id).sort()).toEqual([...ids, stubborn].sort());
    expect(new Set(markers.rows.map((m) => m.xid)).size).toBe(1);
    for (const marker of markers.rows) {
      expect(exitedBy.getTime() - marker.created_at.getTime()).toBeGreaterThanOrEqual(SHUTDOWN_MS);
    }

    const restartedBy = Date.now() + 30_000; // half the staleness window
    for (const id of [...ids, stubborn]) {
      const row = await waitForStatus(database.db, id, 'done', restartedBy - Date.now());
      expect(row).toMatchObject({ attempts: 1 });
      expect(['node-b', 'node-c']).toContain(row.owner_node);
      expect((await journal(database.db, id)).map((j) => j.name)).toEqual(
        expect.arrayContaining(['interrupted', 'resumed']),
      );
    }
    const outputs = await database.db.query(
      `SELECT dedupe_key FROM cyclium_outputs WHERE dedupe_key LIKE 'drain-%' ORDER BY 1`,
    );
    expect(outputs.rows.map((r) => r.dedupe_key)).toEqual([
      'drain-0',
      'drain-1',
      'drain-2',
      'drain-3',
      'drain-stubborn',
    ]);
  });
});
