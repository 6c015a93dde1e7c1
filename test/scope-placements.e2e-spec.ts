import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startAll, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { postTo, startScopeNode } from './support/scope-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * The seed's placements (section 4) with real node processes on one database:
 * - a release-candidate env beside the default env, two full nodes in each with work claims on,
 *   firing the same schedule every 2 s and handed the same manual dedupe key;
 * - a crash in each env, recovered by that env's survivor only;
 * - a trigger-only node of env `rc` that feeds rc's full nodes only;
 * - a node of stack_a (env `stk`, no sweep of its own) sweeping orphans of stack_a, of no stack
 *   and of stack_b, with its own stack and then with a per-call `sourceStack: null`.
 * The tests run in order: the crash test kills rc-a and def-a.
 */
describe('stacks and envs on one database, with real nodes', () => {
  const database = useDatabase();
  const nodes = new Map<string, DemoNode>();
  const node = (id: string) => nodes.get(id) as DemoNode;
  const rows = async <T = Record<string, unknown>>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];
  const statusOf = async (id: string) =>
    (
      await rows<{ status: string; owner_node: string }>(
        `SELECT status, owner_node FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    )[0];
  const done = (id: string, timeoutMs = 30_000) =>
    waitFor(
      `episode ${id} to end done`,
      async () => ((await statusOf(id))?.status === 'done' ? statusOf(id) : null),
      timeoutMs,
    );

  beforeAll(async () => {
    await database.db.query(
      `CREATE TABLE scope_effects (episode_id uuid NOT NULL, step text NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    );
    const full = { SCOPE_CLAIMS: 'postgres', SCOPE_EVERY_MS: '2000' };
    const started = await startAll([
      startScopeNode(database.url, { id: 'rc-a', env: 'rc', extra: full }),
      startScopeNode(database.url, { id: 'rc-b', env: 'rc', extra: full }),
      startScopeNode(database.url, { id: 'def-a', extra: full }),
      startScopeNode(database.url, { id: 'def-b', extra: full }),
      startScopeNode(database.url, { id: 'rc-trigger', env: 'rc', mode: 'trigger_only' }),
      startScopeNode(database.url, {
        id: 'stack-a',
        stack: 'stack_a',
        env: 'stk',
        extra: { SCOPE_SWEEP_MS: 'off' },
      }),
    ]);
    for (const [i, id] of ['rc-a', 'rc-b', 'def-a', 'def-b', 'rc-trigger', 'stack-a'].entries())
      nodes.set(id, started[i] as DemoNode);
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...nodes.values()].map((n) => n.stop('SIGKILL')));
  });

  it('rc and the default env each run their own episode of one schedule bucket and of one dedupe key, with a claim and a finding each', async () => {
    // A bucket both envs have run, and no bucket run twice in one env.
    const buckets = () =>
      rows<{ bucket: string; envs: string[]; n: number }>(
        `SELECT regexp_replace(dedupe_key, ':rc$', '') AS bucket, array_agg(coalesce(source_env, '-') ORDER BY source_env NULLS FIRST) AS envs, count(*)::int AS n
           FROM cyclium_episodes WHERE expectation_id = 'tick' AND status = 'done' GROUP BY 1`,
      );
    await waitFor(
      'a schedule bucket done in both envs',
      async () => (await buckets()).some((b) => b.n === 2),
      20_000,
    );
    for (const bucket of await buckets())
      expect(bucket.envs.length === 1 || bucket.envs.join() === '-,rc').toBe(true);
    const ticks = await rows<{ key: string; claims: number }>(
      // A tick's claim: its claim-table row, or its episode row's alone (a schedule key's first).
      `SELECT e.dedupe_key AS key,
              coalesce(nullif((SELECT count(*)::int FROM cyclium_work_claims c WHERE c.dedupe_key = e.dedupe_key), 0),
                       CASE WHEN e.claim_fence IS NOT NULL THEN 1 ELSE 0 END) AS claims
         FROM cyclium_episodes e WHERE e.expectation_id = 'tick' AND e.status = 'done'`,
    );
    expect(ticks.filter((t) => t.claims !== 1)).toEqual([]);

    const trigger = (id: string) =>
      postTo<{ status: string; episodeId?: string }>(node(id), '/trigger', {
        expectation: 'job',
        payload: { finding: 'disk-full' },
        dedupeKey: 'report-1',
      });
    const inRc = await trigger('rc-a');
    const inDefault = await trigger('def-a');
    expect([inRc.status, inDefault.status]).toEqual(['started', 'started']);
    expect((await trigger('rc-b')).status).toBe('duplicate');
    expect((await trigger('def-b')).status).toBe('duplicate');
    await done(inRc.episodeId as string);
    await done(inDefault.episodeId as string);
    const jobs = await rows<{ dedupe_key: string; source_env: string | null; claims: number }>(
      `SELECT e.dedupe_key, e.source_env, (SELECT count(*)::int FROM cyclium_work_claims c WHERE c.dedupe_key LIKE '%report-1%' AND c.dedupe_key = e.dedupe_key) AS claims
         FROM cyclium_episodes e WHERE e.expectation_id = 'job' ORDER BY e.source_env NULLS FIRST`,
    );
    expect(jobs).toEqual([
      { dedupe_key: 'report-1', source_env: null, claims: 1 },
      { dedupe_key: 'report-1:rc', source_env: 'rc', claims: 1 },
    ]);
    const active = (env: string) =>
      node('rc-b').get<Array<{ finding_key?: string; findingKey?: string; env: string | null }>>(
        `/findings?env=${env}`,
      );
    expect((await active('rc')).map((f) => [f.findingKey, f.env])).toEqual([['disk-full', 'rc']]);
    expect((await active('-')).map((f) => [f.findingKey, f.env])).toEqual([['disk-full', null]]);

    // A node of the default env clears the finding of rc's episode: it lands in rc, the default's stays.
    await postTo(node('def-b'), '/findings', {
      action: { op: 'clear', key: 'disk-full' },
      episodeId: inRc.episodeId,
    });
    expect(await active('rc')).toEqual([]);
    expect((await active('-')).map((f) => f.findingKey)).toEqual(['disk-full']);
  });

  it("a crashed rc node's episode is recovered by an rc node only, and a crashed default node's by a default node only", async () => {
    const slow = async (id: string) =>
      (await postTo<{ episodeId: string }>(node(id), '/trigger', { expectation: 'slow' }))
        .episodeId;
    const [rcEpisode, defaultEpisode] = [await slow('rc-a'), await slow('def-a')];
    const effects = (episodeId: string) =>
      rows<{ step: string; node: string }>(
        `SELECT step, node FROM scope_effects WHERE episode_id = $1 ORDER BY at`,
        [episodeId],
      );
    await waitFor(
      'both episodes past their first step',
      async () =>
        (await effects(rcEpisode)).length >= 1 && (await effects(defaultEpisode)).length >= 1,
    );
    await Promise.all([node('rc-a').stop('SIGKILL'), node('def-a').stop('SIGKILL')]);

    expect((await done(rcEpisode, 40_000))?.owner_node).toBe('rc-b');
    expect((await done(defaultEpisode, 40_000))?.owner_node).toBe('def-b');
    expect(new Set((await effects(rcEpisode)).map((e) => e.node))).toEqual(
      new Set(['rc-a', 'rc-b']),
    );
    expect(new Set((await effects(defaultEpisode)).map((e) => e.node))).toEqual(
      new Set(['def-a', 'def-b']),
    );
    const resumedBy = await rows<{ id: string; env: string | null }>(
      `SELECT s.episode_id AS id, e.source_env AS env FROM cyclium_episode_steps s JOIN cyclium_episodes e ON e.id = s.episode_id
        WHERE s.name = 'resumed' AND s.episode_id = ANY($1::uuid[])`,
      [[rcEpisode, defaultEpisode]],
    );
    expect(resumedBy.length).toBe(2);
  }, 120_000);

  it('a trigger-only node of env rc feeds rc full nodes only: its triggers and events run on rc-b, none in the default env', async () => {
    const triggered = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        postTo<{ episodeId: string }>(node('rc-trigger'), '/trigger', {
          expectation: 'job',
          payload: { finding: `t-${i}` },
        }),
      ),
    );
    for (let n = 0; n < 5; n++)
      await postTo(node('rc-trigger'), '/events', { type: 'scope.ping', payload: { n } });
    for (const { episodeId } of triggered) expect((await done(episodeId))?.owner_node).toBe('rc-b');
    const pings = () =>
      rows<{ env: string | null; owner: string; status: string }>(
        `SELECT source_env AS env, owner_node AS owner, status FROM cyclium_episodes WHERE expectation_id = 'ping'`,
      );
    await waitFor(
      'five pings done',
      async () => (await pings()).filter((p) => p.status === 'done').length === 5,
    );
    expect((await pings()).map((p) => [p.env, p.owner])).toEqual(
      Array.from({ length: 5 }, () => ['rc', 'rc-b']),
    );
    // The default env heard none of them; a marker published there afterwards is seen there alone.
    await postTo(node('def-b'), '/events', { type: 'scope.ping', payload: { n: 99 } });
    await waitFor('the default env ping', async () =>
      (await pings()).some((p) => p.env === null && p.status === 'done'),
    );
    expect((await pings()).filter((p) => p.env === null)).toHaveLength(1);
  }, 60_000);

  it('a stack_a sweep takes stack_a and stackless orphans but not stack_b ones; with sourceStack: null it takes all three', async () => {
    const orphans = await rows<{ id: string; source_stack: string | null }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, source_stack, source_env,
                                     started_at, inserted_at, updated_at)
       SELECT 'scoped', 'slow', 'manual', '{"type": "manual", "payload": {}}', 'running', 'gone-node', s, 'stk',
              now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
         FROM unnest(ARRAY['stack_a', NULL, 'stack_b']) AS s
       RETURNING id, source_stack`,
    );
    const untouched = async () =>
      (
        await rows<{ source_stack: string | null }>(
          `SELECT source_stack FROM cyclium_episodes WHERE id = ANY($1::uuid[]) AND status = 'running' AND owner_node = 'gone-node' AND phase IS NULL`,
          [orphans.map((o) => o.id)],
        )
      ).map((r) => r.source_stack);

    const own = await postTo<{ restarted: number; deferred: number; failed: number }>(
      node('stack-a'),
      '/sweep',
      {},
    );
    expect(own.restarted + own.deferred).toBe(2);
    expect(await untouched()).toEqual(['stack_b']);
    const all = await postTo<{ restarted: number; deferred: number }>(node('stack-a'), '/sweep', {
      sourceStack: null,
    });
    expect(all.restarted + all.deferred).toBe(1);
    expect(await untouched()).toEqual([]);
  });

  it("a sweep of stack_b from stack_a fails stack_b's fail-policy orphans of an actor it does not host and defers the restart-policy ones to stack_b", async () => {
    await database.db.query(
      `INSERT INTO cyclium_actor_scopes (actor_id, source_stack, source_env, expectations)
       VALUES ('elsewhere', 'stack_b', 'stk', '[{"id": "keep", "recovery_policy": "restart"}, {"id": "drop", "recovery_policy": "fail"}]')`,
    );
    const orphans = await rows<{ id: string; expectation_id: string }>(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, source_stack, source_env,
                                     started_at, inserted_at, updated_at)
       SELECT 'elsewhere', x, 'manual', '{"type": "manual", "payload": {}}', 'running', 'gone-node', 'stack_b', 'stk',
              now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
         FROM unnest(ARRAY['keep', 'drop']) AS x
       RETURNING id, expectation_id`,
    );
    const idOf = (expectation: string) => orphans.find((o) => o.expectation_id === expectation)?.id;
    const result = await postTo<{ restarted: number; deferred: number; failed: number }>(
      node('stack-a'),
      '/sweep',
      { sourceStack: 'stack_b' },
    );
    expect(result).toMatchObject({ restarted: 0, deferred: 1, failed: 1 });
    expect(
      (
        await rows(`SELECT status, error_class FROM cyclium_episodes WHERE id = $1`, [idOf('drop')])
      )[0],
    ).toEqual({
      status: 'failed',
      error_class: 'orphaned',
    });
    expect(
      (await rows(`SELECT status FROM cyclium_episodes WHERE id = $1`, [idOf('keep')]))[0],
    ).toEqual({ status: 'deferred' });
    expect(
      await rows(
        `SELECT status, source_stack, source_env, opts FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [idOf('keep')],
      ),
    ).toEqual([
      { status: 'pending', source_stack: 'stack_b', source_env: 'stk', opts: { resume: true } },
    ]);
  });
});
