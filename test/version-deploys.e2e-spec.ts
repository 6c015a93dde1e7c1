import { afterEach, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const VERSIONS_NODE = fileURLToPath(new URL('./fixtures/dist/versions-node.js', import.meta.url));

interface Job {
  napMs: number;
  fail?: boolean;
}

interface Node extends DemoNode {
  id: string;
}

/**
 * New code under running episodes with real node processes on one PostgreSQL (issue 45, "Done
 * when"): a rolling deploy from code A to code B, which inserts a step and renames another inside
 * `ep.patched('x')`, with episodes asleep or in backoff across it; the same deploy without the
 * patch; `deprecatePatch`; and episodes pinned to a version while every node moves to another.
 * The code each node runs is test/fixtures/versions-node.ts, chosen by CODE and VERSION.
 */
describe('deploys under running episodes: patches and versions across node processes', () => {
  const database = useDatabase(4);
  const started: DemoNode[] = [];

  const start = async (id: string, env: Record<string, string>): Promise<Node> => {
    const node = await startNodeProcess(VERSIONS_NODE, database.url, {
      env: { CYCLIUM_NODE_ID: id, ...env },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    started.push(node);
    return Object.assign(node, { id });
  };
  const trigger = async (node: DemoNode, expectation: string, payloads: Job[]) => {
    const { episodeIds } = await post<{ episodeIds: Array<string | null> }>(
      node,
      `/trigger-many/${expectation}`,
      { payloads },
    );
    expect(episodeIds.every((id) => typeof id === 'string')).toBe(true);
    return episodeIds as string[];
  };
  const query = async <T>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];
  /** Each episode's status, error class and journaled step names, by id. */
  const outcomes = async (ids: string[]) => {
    const rows = await query<{
      id: string;
      status: string;
      error_class: string | null;
      error_detail: string | null;
      version: string | null;
      steps: string[];
    }>(
      `SELECT e.id, e.status, e.error_class, e.error_detail, e.version,
              coalesce((SELECT array_agg(s.name ORDER BY s.step_no) FROM cyclium_episode_steps s
                         WHERE s.episode_id = e.id AND s.kind = 'step'), '{}') AS steps
         FROM cyclium_episodes e WHERE e.id = ANY($1::uuid[])`,
      [ids],
    );
    return new Map(rows.map((r) => [r.id, r]));
  };
  const allEnded = (ids: string[], timeoutMs: number) =>
    waitFor(
      `${ids.length} episodes to end`,
      async () =>
        [...(await outcomes(ids)).values()].every((r) =>
          ['done', 'failed', 'canceled'].includes(r.status),
        ),
      timeoutMs,
      250,
    );
  /** Waits until every wake-up of `ids` is due and two polls of every node have passed since. */
  const duePolled = (ids: string[]) =>
    waitFor(
      'their wake-ups due a while ago',
      async () =>
        (
          await query<{ past: boolean }>(
            `SELECT coalesce(now() > max(not_before) + interval '1.5 seconds', false) AS past
               FROM cyclium_trigger_requests WHERE episode_id = ANY($1::uuid[])`,
            [ids],
          )
        )[0]!.past,
      30_000,
      200,
    );

  // Each case's nodes go with it, even when it fails: a node left up would run the next case's
  // episodes with its own code.
  afterEach(async () => {
    await Promise.all(started.splice(0).map((node) => node.stop('SIGKILL')));
  });

  const jobs = (n: number, napMs: (i: number) => number): Job[] =>
    Array.from({ length: n }, (_, i) => ({ napMs: napMs(i), fail: i % 2 === 1 }));

  it('a rolling deploy from A to B with patched("x"): 50 episodes asleep or in backoff all end done, each on its own branch', async () => {
    const nodes = await Promise.all(['up-1', 'up-2', 'up-3'].map((id) => start(id, { CODE: 'A' })));
    // Started on A: asleep 6-14 s, or in a backoff of 6 s after a failed first attempt.
    const onA = (
      await Promise.all(
        nodes.map((node, n) =>
          trigger(
            node,
            'flow',
            jobs(9, (i) => 6_000 + (n * 9 + i) * 300),
          ),
        ),
      )
    )
      .flat()
      .slice(0, 25);
    await waitFor(
      'the A episodes asleep or in backoff',
      async () =>
        [...(await outcomes(onA)).values()].every(
          (r) => r.status === 'waiting' && r.steps.includes('b'),
        ),
      20_000,
      200,
    );
    // The deploy rolls: each node drains and comes back as B; B's first node takes triggers
    // while A nodes still run, and some of those wake while they do.
    const onB: string[] = [];
    // The first B node's own drain interrupts some of its episodes before the patch point is
    // journaled (the marker goes with the step after it): an A peer restarts those from step `a`
    // and rightly takes the old branch. The other B nodes run theirs undisturbed.
    let interrupted: string[] = [];
    const codeA = [...nodes];
    const handedBack = () =>
      codeA
        .map((node) => node.output().match(/handed back: it needs patch x/g)?.length ?? 0)
        .reduce((sum, n) => sum + n, 0);
    for (const [i, node] of nodes.entries()) {
      await node.stop('SIGTERM');
      nodes[i] = await start(node.id, { CODE: 'B' });
      onB.push(
        ...(await trigger(
          nodes[i]!,
          'flow',
          jobs(i === 2 ? 9 : 8, () => 1_000),
        )),
      );
      if (i > 0) continue;
      // The first B node steps out for a moment: its episodes wake on the two A nodes still up,
      // which must hand them back (not fail them) until a B node is there again.
      interrupted = [...onB];
      await nodes[i]!.stop('SIGTERM');
      await waitFor('an A node to hand a B episode back', () => handedBack() > 0, 30_000, 200);
      nodes[i] = await start(node.id, { CODE: 'B' });
    }
    expect(onB).toHaveLength(25);
    await allEnded([...onA, ...onB], 90_000);
    const ended = await outcomes([...onA, ...onB]);
    const failed = [...ended.values()].filter((r) => r.status !== 'done');
    expect(failed.map((r) => `${r.status}/${r.error_class}`)).toEqual([]);
    for (const id of onA) {
      const steps = ended.get(id)!.steps;
      expect(steps).toContain('b');
      expect(steps).not.toContain('patch:x');
      expect(steps.at(-1)).toBe('c');
    }
    const newBranch = ['a', 'patch:x', 'inserted', 'b2', 'c'];
    const branchOf = (id: string) => ended.get(id)!.steps.filter((s) => !s.startsWith('sleep:'));
    for (const id of onB) {
      if (interrupted.includes(id) && branchOf(id).includes('b'))
        expect(branchOf(id)).toEqual(['a', 'b', 'c']);
      else expect(branchOf(id)).toEqual(newBranch);
    }
    const oldBranch = interrupted.filter((id) => branchOf(id).includes('b')).length;
    console.log(
      `rolling deploy: ${handedBack()} hand-back(s) of B episodes by A nodes; ` +
        `${oldBranch} of ${interrupted.length} interrupted before the patch point`,
    );
    await Promise.all(nodes.map((node) => node.stop('SIGTERM')));
  }, 180_000);

  it('the same deploy without the patch fails the A episodes as nondeterministic_resume', async () => {
    // Backoffs of 3 s, longer than the naps of 2 s: whatever wakes first is a nap, as with A's
    // default of 6 s, which B would only wait out.
    const a = await start('plain-1', { CODE: 'A', RETRY_MS: '3000' });
    const ids = await trigger(
      a,
      'flow',
      jobs(6, () => 2_000),
    );
    await waitFor(
      'asleep or in backoff',
      async () => [...(await outcomes(ids)).values()].every((r) => r.status === 'waiting'),
      20_000,
      200,
    );
    // Asleep or in backoff, they hold nothing: A goes at once (a drain would run the ones that
    // wake meanwhile to their end on A).
    await a.stop('SIGKILL');
    const b = await start('plain-2', { CODE: 'B-unpatched', RETRY_MS: '2000' });
    await allEnded(ids, 60_000);
    const ended = [...(await outcomes(ids)).values()];
    expect(ended.map((r) => `${r.status}/${r.error_class}`)).toEqual(
      ids.map(() => 'failed/nondeterministic_resume'),
    );
    await b.stop('SIGTERM');
  }, 90_000);

  it('deprecatePatch refuses an episode that needs the old branch, naming the patch; new ones run', async () => {
    // Backoffs of 3 s, longer than the naps of 2 s (as in the case above).
    const a = await start('dep-1', { CODE: 'A', RETRY_MS: '3000' });
    const old = await trigger(
      a,
      'flow',
      jobs(2, () => 2_000),
    );
    await waitFor(
      'asleep or in backoff',
      async () => [...(await outcomes(old)).values()].every((r) => r.status === 'waiting'),
      20_000,
      200,
    );
    await a.stop('SIGKILL');
    const c = await start('dep-2', { CODE: 'C', RETRY_MS: '2000' });
    const fresh = await trigger(
      c,
      'flow',
      jobs(2, () => 500),
    );
    await allEnded([...old, ...fresh], 60_000);
    const ended = await outcomes([...old, ...fresh]);
    for (const id of old) {
      expect(ended.get(id)).toMatchObject({ status: 'failed', error_class: 'patch_deprecated' });
      expect(ended.get(id)!.error_detail).toContain('patch "x"');
    }
    for (const id of fresh) {
      expect(ended.get(id)!.status).toBe('done');
      expect(ended.get(id)!.steps).toContain('patch:x');
    }
    await c.stop('SIGTERM');
  }, 90_000);

  it('episodes of v1 wait while every node runs v2, resume on a node accepting v1, and on v1 again', async () => {
    const v1 = await start('ver-1', { VERSION: 'v1' });
    const first = await trigger(
      v1,
      'pinned',
      jobs(10, () => 2_000),
    );
    await waitFor(
      'asleep',
      async () => [...(await outcomes(first)).values()].every((r) => r.status === 'waiting'),
      20_000,
      200,
    );
    await v1.stop('SIGKILL');
    const v2 = await Promise.all([
      start('ver-4', { VERSION: 'v2' }),
      start('ver-2', { VERSION: 'v2' }),
    ]);
    await duePolled(first);
    let now = await outcomes(first);
    for (const id of first) expect(now.get(id)).toMatchObject({ status: 'waiting', version: 'v1' });
    const due = await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_trigger_requests
        WHERE episode_id = ANY($1::uuid[]) AND status IN ('pending', 'scheduled')
          AND not_before <= now()`,
      [first],
    );
    expect(due[0]!.n).toBe(first.length);
    // A node whose code accepts v1 takes them over.
    const taker = await start('ver-3', { VERSION: 'v2', ACCEPTS: 'v1' });
    await allEnded(first, 30_000);
    now = await outcomes(first);
    for (const id of first) expect(now.get(id)).toMatchObject({ status: 'done', version: 'v1' });
    const afterOn = await query<{ result: unknown }>(
      `SELECT DISTINCT result_ref->>'v' AS result FROM cyclium_episode_steps
        WHERE episode_id = ANY($1::uuid[]) AND name = 'after'`,
      [first],
    );
    expect(afterOn).toEqual([{ result: 'v2' }]);
    await taker.stop('SIGTERM');

    // A second batch of v1, and a node of v1 booted again: they resume there.
    const again = await start('ver-3', { VERSION: 'v1' });
    const second = await trigger(
      again,
      'pinned',
      jobs(5, () => 2_000),
    );
    await waitFor(
      'asleep',
      async () => [...(await outcomes(second)).values()].every((r) => r.status === 'waiting'),
      20_000,
      200,
    );
    await again.stop('SIGKILL');
    await duePolled(second);
    now = await outcomes(second);
    for (const id of second)
      expect(now.get(id)).toMatchObject({ status: 'waiting', version: 'v1' });
    const back = await start('ver-5', { VERSION: 'v1' });
    await allEnded(second, 30_000);
    const onV1 = await query<{ result: unknown }>(
      `SELECT DISTINCT result_ref->>'v' AS result FROM cyclium_episode_steps
        WHERE episode_id = ANY($1::uuid[]) AND name = 'after'`,
      [second],
    );
    expect(onV1).toEqual([{ result: 'v1' }]);
    expect([...(await outcomes(second)).values()].every((r) => r.status === 'done')).toBe(true);
    await Promise.all([...v2, back].map((node) => node.stop('SIGTERM')));
  }, 240_000);
});
