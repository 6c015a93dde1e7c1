import { afterEach, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, journal, post, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

interface Instance {
  status: string;
  stepStates: Record<string, { status: string; attempts: number; episodeId: string | null }>;
}

/**
 * Seed sections 3.4 and 7 with real processes: the workflow engine advances only on terminal bus
 * events, so a step that ends while no engine listens leaves its instance running until a node's
 * boot-time reconciliation replays the event.
 */
describe('workflows across a deploy, with real node processes', () => {
  const database = useDatabase();
  const started: DemoNode[] = [];

  afterEach(async () => {
    await Promise.all(started.splice(0).map((node) => node.stop('SIGKILL')));
  });

  const boot = async (id: string, env: Record<string, string> = {}) => {
    const node = await startNode(database.url, id, { ...FAST_RECOVERY, ...env });
    started.push(node);
    return node;
  };
  const rows = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows;
  const stepEpisode = async (instanceId: string, step: string) =>
    (
      await rows(
        `SELECT * FROM cyclium_episodes WHERE workflow_instance_id = $1 AND workflow_step_id = $2 ORDER BY inserted_at`,
        [instanceId, step],
      )
    )[0];
  const startReview = async (node: DemoNode, input: Record<string, unknown>) =>
    (await post<{ instanceId: string }>(node, '/workflows/resource_review', { input })).instanceId;
  const until = async (
    node: DemoNode,
    id: string,
    status: string,
    timeoutMs = 30_000,
  ): Promise<Instance> =>
    (await waitFor(
      `instance ${id} to be ${status}`,
      async () => {
        const instance = await node.get<Instance>(`/workflows/${id}`);
        return instance.status === status ? instance : null;
      },
      timeoutMs,
      100,
    )) as Instance;
  /** The replayed terminal event a node published for `episodeId`, if any. */
  const replayedBy = async (episodeId: string) =>
    (
      await rows(
        `SELECT publisher FROM cyclium_events WHERE payload->>'episodeId' = $1 AND (payload->>'replayed')::boolean`,
        [episodeId],
      )
    ).map((r) => r.publisher);

  it("a step that ends while no engine listens leaves the instance running; a node's boot reconciliation replays it and the workflow completes", async () => {
    // A node that runs steps but advances nothing: the check ends, and nobody hears it end.
    const worker = await boot('wf-worker', { DEMO_WORKFLOW_ENGINE: 'off' });
    const id = await startReview(worker, { resource: 'db-1', usage: 95, limit: 90 });
    const check = await waitFor('the check to be done', async () => {
      const row = await stepEpisode(id, 'check');
      return row?.status === 'done' ? row : null;
    });
    // Time passes (one of the worker's sweeps after the check ended), and still nothing moved.
    await waitFor('a sweep after the check ended', async () => {
      const { lastSweep } = await worker.get<{ lastSweep: { at: string } | null }>('/node');
      return lastSweep !== null && new Date(lastSweep.at) > check.finished_at;
    });
    const stuck = await worker.get<Instance>(`/workflows/${id}`);
    expect(stuck.status).toBe('running');
    expect(stuck.stepStates.check).toMatchObject({ status: 'running', episodeId: check.id });
    expect(await stepEpisode(id, 'advise')).toBeUndefined();

    // A node with the engine boots: sweep, then reconcile, replays the check's end; it advances.
    await boot('wf-engine');
    const done = await until(worker, id, 'done');
    expect(done.stepStates).toMatchObject({
      check: { status: 'done', attempts: 1 },
      advise: { status: 'done', attempts: 1 },
    });
    expect(await replayedBy(check.id)).toContain('wf-engine');
    const advise = await stepEpisode(id, 'advise');
    expect(advise).toMatchObject({ status: 'done', trigger_type: 'workflow' });
    expect(advise.summary).toMatch(/raise the limit of db-1 above 90%/);
    expect(
      await rows(`SELECT 1 FROM cyclium_episodes WHERE workflow_instance_id = $1`, [id]),
    ).toHaveLength(2);
  }, 120_000);

  it('a deploy mid-workflow: SIGTERM drains the running step, a step ends in the window, the new node sweeps and reconciles, and both workflows complete', async () => {
    const old = await boot('wf-old');
    const worker = await boot('wf-worker-2', { DEMO_WORKFLOW_ENGINE: 'off' });
    // Advice is drafted only on engine nodes here, so the draft in flight is the old node's.
    await fetch(`http://127.0.0.1:${worker.port}/mode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ overrides: { resource_advisor: 'trigger_only' } }),
    });

    const drafting = await startReview(old, {
      resource: 'db-x',
      usage: 50,
      limit: 90,
      draftMs: 4_000,
    });
    const inFlight = await waitFor('the advice to be mid-draft on the old node', async () => {
      const row = await stepEpisode(drafting, 'advise');
      if (row?.status !== 'running' || row.owner_node !== 'wf-old') return null;
      return (await journal(database.db, row.id)).some((s) => s.name === 'read_finding')
        ? row
        : null;
    });

    await old.stop('SIGTERM'); // drain: stamped interrupted, claim released, marker journaled
    // The worker's next sweep may already have taken it for a deferred restart (phase recovering).
    expect(['interrupted', 'recovering']).toContain((await stepEpisode(drafting, 'advise')).phase);
    expect(
      (await journal(database.db, inFlight.id)).filter((s) => s.name === 'interrupted'),
    ).toHaveLength(1);

    // No engine anywhere now: a review started meanwhile gets its check done, and no further.
    const windowed = await startReview(worker, { resource: 'db-y', usage: 99, limit: 90 });
    const check = await waitFor('the windowed check to be done', async () => {
      const row = await stepEpisode(windowed, 'check');
      return row?.status === 'done' ? row : null;
    });
    expect((await worker.get<Instance>(`/workflows/${windowed}`)).stepStates.check.status).toBe(
      'running',
    );

    await boot('wf-new');
    const [x, y] = await Promise.all([
      until(worker, drafting, 'done'),
      until(worker, windowed, 'done'),
    ]);
    // The interrupted draft was restarted by the new node, exactly once, and finished there.
    const restarted = await stepEpisode(drafting, 'advise');
    expect(restarted).toMatchObject({
      id: inFlight.id,
      status: 'done',
      owner_node: 'wf-new',
      attempts: 1,
    });
    const kinds = (await journal(database.db, inFlight.id)).map((s) => s.name);
    expect(kinds.filter((k) => k === 'interrupted')).toHaveLength(1);
    expect(kinds.filter((k) => k === 'resumed')).toHaveLength(1);
    expect(x.stepStates.advise).toMatchObject({
      status: 'done',
      attempts: 1,
      episodeId: inFlight.id,
    });
    // The check that ended in the window was replayed by the new node's reconciliation.
    expect(await replayedBy(check.id)).toContain('wf-new');
    expect(y.stepStates).toMatchObject({
      check: { status: 'done', attempts: 1 },
      advise: { status: 'done', attempts: 1 },
    });
    for (const instance of [drafting, windowed]) {
      expect(
        await rows(`SELECT 1 FROM cyclium_episodes WHERE workflow_instance_id = $1`, [instance]),
      ).toHaveLength(2);
    }
  }, 90_000);
});
