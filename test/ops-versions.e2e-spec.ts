import { randomUUID } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { Injectable, type Type } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  InvalidVersionMoveError,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import chromium from '@sparticuz/chromium';
import { chromium as pw } from 'playwright-core';
import { TriggerPoller } from '../libs/cyclium/src/dispatch/trigger-poller.service.js';
import { inProcessDeploys } from './support/deploys.js';
import { waitFor } from './support/wait-for.js';

/** `pinned.nap` at `version`, accepting `accepts`: a step, a sleep of `napMs`, a step. */
function pinnedActor(version: string, accepts?: string[]) {
  @Injectable()
  @Actor({ id: 'pinned' })
  class Pinned {
    @Expectation({ id: 'nap', trigger: 'manual', version, accepts })
    async nap(ep: EpisodeContext<{ napMs: number }>): Promise<Convergence> {
      await ep.step('before', () => version);
      await ep.sleep('nap', ep.trigger.payload.napMs);
      await ep.step('after', () => version);
      return {};
    }
  }
  return Pinned;
}

interface VersionItem {
  actorId: string;
  expectationId: string;
  version: string;
  counts: Record<string, number>;
  hosted: boolean;
}

/** The page's row for the test's one episode, waiting on `version`. */
const oneWaiting = (version: string, hosted: boolean): VersionItem => ({
  actorId: 'pinned',
  expectationId: 'nap',
  version,
  counts: { waiting: 1 },
  hosted,
});

/**
 * The operations API for versions, in process, one "deploy" after another on one database: an
 * episode pinned to a version no live node runs shows as waiting for it; the operator's move is
 * refused unless this node's code accepts the old version, validated, and once done lets nodes of
 * the new version (without `accepts`) run the episode; Episodes.moveVersion answers the same.
 */
describe('the operations API: versions in flight and moving them', () => {
  const node = inProcessDeploys('ops-versions', { ops: true });
  const deploy = (actor: Type<unknown>) => node.deploy(actor);
  const call = async <T>(path: string, body?: object): Promise<{ status: number; body: T }> => {
    const response = await fetch(`${node.base}/ops/api${path}`, {
      method: body ? 'POST' : 'GET',
      headers: body ? { 'content-type': 'application/json', 'x-cyclium-ops': '1' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, body: (await response.json()) as T };
  };
  const rowOf = async (id: string) =>
    (
      await node.db.query<{ status: string; version: string | null }>(
        `SELECT status, version FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0]!;

  it('shows a v1 episode waiting for v1, refuses a move the code does not accept, and moves it', async () => {
    await deploy(pinnedActor('v1'));
    const started = await node.app.get(Episodes).trigger('pinned', 'nap', { napMs: 60_000 });
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('asleep', async () => (await rowOf(id)).status === 'waiting');

    // Every node moves to v2: the episode waits for a node of v1, and the page says so.
    await deploy(pinnedActor('v2'));
    const one = await call<{ episode: { waitingFor: string; version: string } }>(`/episodes/${id}`);
    expect(one.body.episode).toMatchObject({ waitingFor: 'version v1', version: 'v1' });
    const listed = await call<{ items: VersionItem[] }>('/versions');
    expect(listed.body.items).toEqual([oneWaiting('v1', false)]);
    const body = { actorId: 'pinned', expectationId: 'nap', from: 'v1', to: 'v2' };
    // v2's code here does not accept v1: refused, nothing moved.
    const refused = await call<{ message: string }>('/versions/move', body);
    expect(refused.status).toBe(409);
    expect(refused.body.message).toContain(`accepts: ['v1']`);
    expect((await rowOf(id)).version).toBe('v1');
    // The caller's mistakes: 400, naming the field.
    const bad = await call<{ message: string[] }>('/versions/move', { ...body, from: 'v@1' });
    expect(bad.status).toBe(400);
    expect(bad.body.message.join(' ')).toContain('from');
    const missing = await call<{ message: string[] }>('/versions/move', { ...body, to: '' });
    expect(missing.status).toBe(400);
    await expect(node.app.get(Episodes).moveVersion({ ...body, to: 'v1' })).rejects.toBeInstanceOf(
      InvalidVersionMoveError,
    );

    // A node whose code accepts v1 moves them; a plain v2 node then runs them.
    await deploy(pinnedActor('v2', ['v1']));
    // The operator moves them on the page: Move to…, the version asked, the move confirmed.
    const executablePath = await chromium.executablePath();
    const browser = await pw.launch({ executablePath, args: chromium.args, headless: true });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      const dialogs: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('dialog', (dialog) => {
        dialogs.push(dialog.type());
        void (dialog.type() === 'prompt' ? dialog.accept('v2') : dialog.accept());
      });
      page.setDefaultTimeout(15_000);
      await page.goto(`${node.base}/ops`);
      const row = page.locator('[data-testid="version-row"][data-version="v1"]');
      await row.waitFor();
      // The episode's detail names the version it is pinned to.
      await page.locator(`[data-testid="episode-row"][data-episode-id="${id}"]`).click();
      expect(await page.getByTestId('detail-version').textContent()).toBe('v1');
      // This node accepts v1: a live node runs it now.
      expect(await row.getByTestId('version-hosted').textContent()).toBe('a live node runs it');
      await row.getByTestId('version-move').click();
      await waitFor('the move answered', async () =>
        /moved/.test((await page.getByTestId('versions-result').textContent()) ?? '')
          ? true
          : undefined,
      );
      expect(await page.getByTestId('versions-result').textContent()).toBe(
        'moved 1 episode(s) to v2',
      );
      expect(dialogs).toEqual(['prompt', 'confirm']);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
    expect((await rowOf(id)).version).toBe('v2');
    const marker = await node.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'version_moved'`,
      [id],
    );
    expect(marker.rows[0]!.result_ref).toMatchObject({ from: 'v1', to: 'v2' });
    await deploy(pinnedActor('v2'));
    // Its wake-up is a minute away: the test makes it due now.
    await node.db.query(
      `UPDATE cyclium_trigger_requests SET not_before = now() WHERE episode_id = $1
          AND status IN ('pending', 'scheduled')`,
      [id],
    );
    await node.app.get(TriggerPoller).pollNow();
    // Resumed there (its sleep has most of its minute left, so it sleeps on): a `woken` marker
    // after the move, nothing failed, pinned to v2 now.
    await waitFor('resumed on a plain v2 node', async () => {
      const { rows } = await node.db.query(
        `SELECT 1 FROM cyclium_episode_steps w
          WHERE w.episode_id = $1 AND w.name = 'woken'
            AND w.step_no > (SELECT step_no FROM cyclium_episode_steps
                              WHERE episode_id = $1 AND name = 'version_moved')`,
        [id],
      );
      return rows.length === 1 && (await rowOf(id)).status === 'waiting';
    });
    expect(await rowOf(id)).toEqual({ status: 'waiting', version: 'v2' });
    const versions = await call<{ items: VersionItem[] }>('/versions');
    expect(versions.body.items).toEqual([oneWaiting('v2', true)]);
  });
});

/**
 * Whether a live node runs a version is read in the episode's stack and env: a node of another
 * env declaring `nap@v1` does not make a v1 episode here hosted (it never takes its wake-ups). The
 * move takes waiting rows and running rows whose node is gone, never one a live node runs.
 */
describe('the operations API: versions are hosted per env; the move leaves live runs', () => {
  const node = inProcessDeploys('ops-versions-scope', { ops: true });
  const call = async <T>(path: string, body?: object): Promise<{ status: number; body: T }> => {
    const response = await fetch(`${node.base}/ops/api${path}`, {
      method: body ? 'POST' : 'GET',
      headers: body ? { 'content-type': 'application/json', 'x-cyclium-ops': '1' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, body: (await response.json()) as T };
  };
  /** A node row of another process, beating now, declaring `entries` of pinned. */
  const nodeRow = (identity: string, env: string | null, entries: string[]) =>
    node.db.query(
      `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, actors,
                                  boot_id, expectations, started_at, last_seen_at)
       VALUES ($1, NULL, $2, 'full', 'elsewhere', 1, '0.0.0', ARRAY['pinned'], $3::uuid,
               jsonb_build_object('boot', $3::text,
                                  'hosted', jsonb_build_object('pinned', $4::jsonb)),
               now(), now())`,
      [identity, env, randomUUID(), JSON.stringify(entries)],
    );
  const pinnedRow = async (status: 'waiting' | 'running', ownerNode: string | null) => {
    const row = await node.app.get(Episodes).create({
      actorId: 'pinned',
      expectationId: 'nap',
      status,
      ownerNode,
      payload: { napMs: 0 },
    });
    await node.db.query(`UPDATE cyclium_episodes SET version = 'v1' WHERE id = $1`, [row.id]);
    return row.id;
  };
  const versionOf = async (id: string) =>
    (
      await node.db.query<{ version: string }>(
        `SELECT version FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0]!.version;

  it('counts only nodes of the episode env, and moves what no live node runs', async () => {
    await node.deploy(pinnedActor('v2'));
    const waiting = await pinnedRow('waiting', null);
    const orphan = await pinnedRow('running', 'gone-node');
    await nodeRow('busy-node', null, ['nap']);
    const live = await pinnedRow('running', 'busy-node');
    // A v1 node of another env: it runs v1, but not this env's episodes.
    await nodeRow('staging-v1', 'staging', ['nap', 'nap@v1']);

    const one = await call<{ episode: { waitingFor: string | null } }>(`/episodes/${waiting}`);
    expect(one.body.episode.waitingFor).toBe('version v1');
    const listed = await call<{ items: VersionItem[] }>('/versions');
    expect(listed.body.items).toEqual([expect.objectContaining({ version: 'v1', hosted: false })]);

    // A v1 node of this env: now it is hosted.
    await nodeRow('default-v1', null, ['nap', 'nap@v1']);
    expect((await call<{ items: VersionItem[] }>('/versions')).body.items).toEqual([
      expect.objectContaining({ version: 'v1', hosted: true }),
    ]);
    expect(
      (await call<{ episode: { waitingFor: string | null } }>(`/episodes/${waiting}`)).body.episode
        .waitingFor,
    ).not.toBe('version v1');

    await node.deploy(pinnedActor('v2', ['v1']));
    const body = { actorId: 'pinned', expectationId: 'nap', from: 'v1', to: 'v2' };
    // A state change without the page's header (a cross-site form could send this): refused.
    const forged = await fetch(`${node.base}/ops/api/versions/move`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(forged.status).toBe(403);
    expect(await versionOf(waiting)).toBe('v1');
    const moved = await call<{ moved: number; episodeIds: string[] }>('/versions/move', body);
    expect(moved.status).toBe(200);
    expect(moved.body.episodeIds.sort()).toEqual([waiting, orphan].sort());
    expect([await versionOf(waiting), await versionOf(orphan), await versionOf(live)]).toEqual([
      'v2',
      'v2',
      'v1',
    ]);
  });
});
