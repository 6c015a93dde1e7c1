import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import type { DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { postTo, startScopeNode } from './support/scope-node.js';
import { waitFor } from './support/wait-for.js';

const STEP_MS = '1000';
const INTEGRITY = { SCOPE_INTEGRITY: '1', SCOPE_CLAIMS: 'postgres', SCOPE_STEP_MS: STEP_MS };
/** The only node of its env, killed and booted again by one case. */
const SOLO = { id: 'int-solo', env: 'int-solo', extra: INTEGRITY };

/**
 * Signed rows (the `integrity` option) with real node processes: someone with write access to the
 * shared tables but not the key edits a checkpoint, copies one from another episode, points a
 * trigger request at another actor, inserts a cancel event and a hundred node rows. Each tampered
 * row fails only its own episode or request as `tampered`, or is ignored, with a log line naming
 * it; the episodes nobody touched finish as usual. Nodes without the option (envs `ctl` and
 * `ctl-resume`) still take an edited checkpoint and run an edited request, as before signing.
 */
describe('rows nobody can forge: the integrity option', () => {
  const database = useDatabase();
  const nodes = new Map<string, DemoNode>();
  const node = (id: string) => nodes.get(id) as DemoNode;
  const rows = async <T = Record<string, unknown>>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];
  const episode = async (id: string) =>
    (
      await rows<{ status: string; error_class: string | null; owner_node: string }>(
        `SELECT status, error_class, owner_node FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    )[0];
  const ended = (id: string, timeoutMs = 30_000) =>
    waitFor(
      `episode ${id} to end`,
      async () => {
        const row = await episode(id);
        return row && !['running', 'queued', 'deferred'].includes(row.status) ? row : null;
      },
      timeoutMs,
    );
  const trigger = async (id: string, expectation: string, payload: unknown = {}) =>
    (
      await postTo<{ status: string; episodeId: string }>(node(id), '/trigger', {
        expectation,
        payload,
      })
    ).episodeId;
  const logged = (id: string, text: string) =>
    waitFor(`${id} to log ${text}`, () => node(id).output().includes(text), 15_000);

  beforeAll(async () => {
    await database.db.query(
      `CREATE TABLE scope_effects (episode_id uuid NOT NULL, step text NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    );
    const started = await Promise.all([
      startScopeNode(database.url, { id: 'int-a', env: 'int', extra: INTEGRITY }),
      startScopeNode(database.url, { id: 'int-b', env: 'int', extra: INTEGRITY }),
      startScopeNode(database.url, {
        id: 'int-t',
        env: 'int-r',
        mode: 'trigger_only',
        extra: INTEGRITY,
      }),
      startScopeNode(database.url, { id: 'ctl-t', env: 'ctl', mode: 'trigger_only' }),
      startScopeNode(database.url, {
        id: 'ctl-a',
        env: 'ctl-resume',
        extra: { SCOPE_CLAIMS: 'postgres', SCOPE_STEP_MS: STEP_MS },
      }),
      startScopeNode(database.url, {
        id: 'ctl-b',
        env: 'ctl-resume',
        extra: { SCOPE_CLAIMS: 'postgres', SCOPE_STEP_MS: STEP_MS },
      }),
      startScopeNode(database.url, SOLO),
    ]);
    const ids = ['int-a', 'int-b', 'int-t', 'ctl-t', 'ctl-a', 'ctl-b', 'int-solo'];
    for (const [i, id] of ids.entries()) nodes.set(id, started[i] as DemoNode);
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...nodes.values()].map((n) => n.stop('SIGKILL')));
  });

  it('a checkpoint edited, or copied from another episode, fails only its episode on resume as tampered; an untouched one resumes and ends done', async () => {
    const [edited, copied, untouched] = [
      await trigger('int-a', 'slow'),
      await trigger('int-a', 'slow'),
      await trigger('int-a', 'slow'),
    ];
    const checkpoints = async (id: string) =>
      (
        await rows<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclium_episode_checkpoints WHERE episode_id = $1`,
          [id],
        )
      )[0]?.n ?? 0;
    await waitFor(
      'two checkpoints each',
      async () =>
        (await checkpoints(edited)) >= 2 &&
        (await checkpoints(copied)) >= 1 &&
        (await checkpoints(untouched)) >= 1,
    );
    await node('int-a').stop('SIGKILL');
    nodes.delete('int-a');
    await database.db.query(
      `UPDATE cyclium_episode_checkpoints SET state = '{"v": 999}' WHERE episode_id = $1 AND checkpoint_no = 1`,
      [edited],
    );
    // The untouched episode's first checkpoint, signature and all, in place of this one's.
    await database.db.query(
      `DELETE FROM cyclium_episode_checkpoints WHERE episode_id = $1 AND checkpoint_no = 1`,
      [copied],
    );
    await database.db.query(
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state, signature)
       SELECT $2, checkpoint_no, phase, state, signature FROM cyclium_episode_checkpoints WHERE episode_id = $1 AND checkpoint_no = 1`,
      [untouched, copied],
    );

    expect(await ended(edited)).toMatchObject({
      status: 'failed',
      error_class: 'tampered',
      owner_node: 'int-b',
    });
    expect(await ended(copied)).toMatchObject({
      status: 'failed',
      error_class: 'tampered',
      owner_node: 'int-b',
    });
    expect(await ended(untouched)).toMatchObject({ status: 'done', owner_node: 'int-b' });
    await logged('int-b', `cyclium_episode_checkpoints row (${edited}, 1)`);
    await logged('int-b', `cyclium_episode_checkpoints row (${copied}, 1)`);
    // The tampered ones ran no step past the tampered checkpoint.
    const after = await rows<{ episode_id: string }>(
      `SELECT episode_id FROM scope_effects WHERE node = 'int-b' AND episode_id = ANY($1::uuid[])`,
      [[edited, copied]],
    );
    expect(after).toEqual([]);
  }, 180_000);

  it('the only node, killed and back under the same identity, resumes from its own signed checkpoints: nothing tampered, no step run twice', async () => {
    const episodeId = await trigger('int-solo', 'slow');
    await waitFor(
      'two checkpoints',
      async () =>
        (await rows(`SELECT 1 FROM cyclium_episode_checkpoints WHERE episode_id = $1`, [episodeId]))
          .length >= 2,
    );
    await node('int-solo').stop('SIGKILL');
    // No node of its env is up now; the same identity comes straight back.
    nodes.set('int-solo', await startScopeNode(database.url, SOLO));
    expect(await ended(episodeId, 40_000)).toMatchObject({
      status: 'done',
      error_class: null,
      owner_node: 'int-solo',
    });
    const steps = await rows<{ step: string; n: number }>(
      `SELECT step, count(*)::int AS n FROM scope_effects WHERE episode_id = $1 GROUP BY step ORDER BY step`,
      [episodeId],
    );
    // A step the kill interrupted may run twice; the two checkpointed before it ran once.
    expect(steps.slice(0, 2)).toEqual([
      { step: 's1', n: 1 },
      { step: 's2', n: 1 },
    ]);
    expect(steps.map((s) => s.step)).toEqual(['s1', 's2', 's3', 's4', 's5']);
  }, 60_000);

  it('without the option an edited checkpoint is taken as it stands on resume, as before signing', async () => {
    const edited = await trigger('ctl-a', 'slow');
    await waitFor(
      'two checkpoints',
      async () =>
        (await rows(`SELECT 1 FROM cyclium_episode_checkpoints WHERE episode_id = $1`, [edited]))
          .length >= 2,
    );
    await node('ctl-a').stop('SIGKILL');
    nodes.delete('ctl-a');
    await database.db.query(
      `UPDATE cyclium_episode_checkpoints SET state = '{"v": 999}' WHERE episode_id = $1 AND checkpoint_no = 1`,
      [edited],
    );
    expect(await ended(edited)).toMatchObject({ status: 'done', owner_node: 'ctl-b' });
    // Step 1 was not run again: its edited checkpoint stood in for it.
    expect(
      await rows(
        `SELECT 1 FROM scope_effects WHERE episode_id = $1 AND step = 's1' AND node = 'ctl-b'`,
        [edited],
      ),
    ).toEqual([]);
  }, 60_000);

  it('a forged cancel event and a hundred forged node rows are ignored with a log line; events still start at once', async () => {
    const running = await trigger('int-b', 'slow');
    await waitFor(
      'the first step',
      async () =>
        (await rows(`SELECT 1 FROM scope_effects WHERE episode_id = $1`, [running])).length > 0,
    );
    await database.db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher, source_env)
       VALUES ($1, 'forged-cancel-1', 'cyclium.episode.cancel', jsonb_build_object('episodeId', $2::text), now(), 'int-b', 'int')`,
      [busChannel(null, 'int'), running],
    );
    await database.db.query(
      `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, started_at, last_seen_at)
       SELECT 'forged-' || g, NULL, 'int', 'full', 'nowhere', 1, '9.9.9', now(), now() + interval '1 hour' FROM generate_series(1, 100) g`,
    );
    await logged('int-b', 'ignored node row "forged-');
    const sentAt = Date.now();
    await postTo(node('int-b'), '/events', { type: 'scope.ping', payload: { n: 1 } });
    const ping = await waitFor('the ping episode to end', async () => {
      const found = await rows<{ status: string }>(
        `SELECT status FROM cyclium_episodes WHERE expectation_id = 'ping' AND source_env = 'int'`,
      );
      return found[0]?.status === 'done' ? found[0] : null;
    });
    expect(ping?.status).toBe('done');
    // Counted, a hundred rows would rank this node behind them: three backup steps of 6.75 s.
    expect(Date.now() - sentAt).toBeLessThan(5_000);
    await logged('int-b', 'ignored event');
    expect(node('int-b').output()).toContain('(cyclium.episode.cancel, id forged-cancel-1)');
    expect(await ended(running)).toMatchObject({ status: 'done' });
  }, 120_000);

  it('a trigger request pointed at another actor fails as tampered with its episode, and the next one runs; without the option it runs as edited', async () => {
    const pointAtOther = (id: string) =>
      database.db.query(
        `WITH r AS (UPDATE cyclium_trigger_requests SET actor_id = 'other' WHERE episode_id = $1 RETURNING 1)
         UPDATE cyclium_episodes SET actor_id = 'other' WHERE id = $1 AND EXISTS (SELECT 1 FROM r)`,
        [id],
      );
    const [tampered, honest, control] = [
      await trigger('int-t', 'job', { finding: 'a' }),
      await trigger('int-t', 'job', { finding: 'b' }),
      await trigger('ctl-t', 'job', { finding: 'c' }),
    ];
    await pointAtOther(tampered);
    await pointAtOther(control);
    const [full, controlFull] = await Promise.all([
      startScopeNode(database.url, { id: 'int-r-full', env: 'int-r', extra: INTEGRITY }),
      startScopeNode(database.url, { id: 'ctl-full', env: 'ctl' }),
    ]);
    nodes.set('int-r-full', full);
    nodes.set('ctl-full', controlFull);

    expect(await ended(tampered)).toMatchObject({ status: 'failed', error_class: 'tampered' });
    expect(await ended(honest)).toMatchObject({ status: 'done', owner_node: 'int-r-full' });
    const request = (
      await rows<{ status: string; error: string }>(
        `SELECT status, error FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [tampered],
      )
    )[0];
    expect(request?.status).toBe('failed');
    expect(request?.error).toMatch(/not signed by this deployment's integrity key/);
    const tamperedLine = new RegExp(`episode ${tampered} \\([^)]*\\) failed as tampered`);
    await waitFor(
      'int-r-full to log the tampered episode',
      () => tamperedLine.test(node('int-r-full').output()),
      15_000,
    );
    expect(
      await rows(`SELECT 1 FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'other'`, [
        tampered,
      ]),
    ).toEqual([]);

    // As before signing: the edited request runs the other actor.
    expect(await ended(control)).toMatchObject({ status: 'done', owner_node: 'ctl-full' });
    expect(
      await rows(`SELECT 1 FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'other'`, [
        control,
      ]),
    ).toHaveLength(1);
  }, 120_000);
});
