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
    expect(listed.body.items).toEqual([
      {
        actorId: 'pinned',
        expectationId: 'nap',
        version: 'v1',
        counts: { waiting: 1 },
        hosted: false,
      },
    ]);
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
    expect(versions.body.items).toEqual([
      {
        actorId: 'pinned',
        expectationId: 'nap',
        version: 'v2',
        counts: { waiting: 1 },
        hosted: true,
      },
    ]);
  });
});
