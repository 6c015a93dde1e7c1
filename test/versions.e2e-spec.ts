import { describe, expect, it } from '@jest/globals';
import { Injectable, type Type } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { TriggerPoller } from '../libs/cyclium/src/dispatch/trigger-poller.service.js';
import { inProcessDeploys } from './support/deploys.js';
import { waitFor } from './support/wait-for.js';

type Nap = { napMs: number };

/** The same expectation at `version`, accepting `accepts`; it sleeps `napMs`, then ends. */
function pinnedActor(version: string | undefined, accepts?: string[]) {
  @Injectable()
  @Actor({ id: 'pinned', maxConcurrentEpisodes: 10 })
  class Pinned {
    @Expectation({ id: 'nap', trigger: 'manual', version, accepts })
    async nap(ep: EpisodeContext<Nap>): Promise<Convergence> {
      await ep.step('before', () => version ?? null);
      await ep.sleep('nap', ep.trigger.payload.napMs);
      await ep.step('after', () => version ?? null);
      return {};
    }
  }
  return Pinned;
}

/** A limited expectation at `version`: one at a time across the env. */
function limitedActor(version: string) {
  @Injectable()
  @Actor({ id: 'pinned-limited', maxConcurrentEpisodes: 10 })
  class PinnedLimited {
    @Expectation({ id: 'nap', trigger: 'manual', version, concurrency: { limit: 1 } })
    async nap(ep: EpisodeContext<Nap>): Promise<Convergence> {
      await ep.step('before', () => version);
      await ep.sleep('nap', ep.trigger.payload.napMs);
      await ep.step('after', () => version);
      return {};
    }
  }
  return PinnedLimited;
}

/** Version pinning across "deploys" of one process, on a real PostgreSQL. */
describe('versions: an episode waits for code of its version', () => {
  const node = inProcessDeploys('versions-node');
  const deploy = (actor: Type<unknown>) => node.deploy(actor);
  const start = async (napMs: number): Promise<string> => {
    const started = await node.app.get(Episodes).trigger('pinned', 'nap', { napMs });
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    return started.episode.id;
  };
  const row = async (id: string) =>
    (
      await node.db.query<{ status: string; version: string | null; error_class: string | null }>(
        `SELECT status, version, error_class FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0]!;
  const results = async (id: string) =>
    (
      await node.db.query<{ name: string; result_ref: unknown }>(
        `SELECT name, result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND kind = 'step'
          ORDER BY step_no`,
        [id],
      )
    ).rows.map((r) => `${r.name}=${JSON.stringify(r.result_ref)}`);

  /** Waits until the episode's wake-up is due, then has this node poll twice. */
  const duePolled = async (id: string) => {
    await waitFor('its wake-up due', async () => {
      const { rows } = await node.db.query(
        `SELECT 1 FROM cyclium_trigger_requests WHERE episode_id = $1
            AND status IN ('pending', 'scheduled') AND not_before <= now()`,
        [id],
      );
      return rows.length === 1;
    });
    await node.app.get(TriggerPoller).pollNow();
    await node.app.get(TriggerPoller).pollNow();
  };

  it('records the version, waits (not failed) on v2, and resumes on a node that accepts v1', async () => {
    await deploy(pinnedActor('v1'));
    const id = await start(300);
    await waitFor('asleep', async () => (await row(id)).status === 'waiting');
    expect((await row(id)).version).toBe('v1');
    await deploy(pinnedActor('v2'));
    // Past its wake-up, polled twice by a node of v2 only: nothing took it, nothing failed.
    await duePolled(id);
    expect(await row(id)).toMatchObject({ status: 'waiting', version: 'v1', error_class: null });
    const { rows } = await node.db.query(
      `SELECT status FROM cyclium_trigger_requests WHERE episode_id = $1
          AND status IN ('pending', 'scheduled') AND not_before <= now()`,
      [id],
    );
    expect(rows).toHaveLength(1);
    // A fresh episode on v2 records v2.
    const fresh = await start(50);
    await waitFor('v2 done', async () => (await row(fresh)).status === 'done');
    expect((await row(fresh)).version).toBe('v2');
    await deploy(pinnedActor('v2', ['v1']));
    await waitFor('v1 done on the accepting node', async () => (await row(id)).status === 'done');
    expect((await results(id)).filter((r) => !r.startsWith('sleep:'))).toEqual([
      'before={"v":"v1"}',
      'after={"v":"v2"}',
    ]);
    expect((await row(id)).version).toBe('v1');
  });

  it('resumes a v1 episode when a v1 node comes back', async () => {
    await deploy(pinnedActor('v1'));
    const id = await start(300);
    await waitFor('asleep', async () => (await row(id)).status === 'waiting');
    await deploy(pinnedActor('v2'));
    await duePolled(id);
    expect((await row(id)).status).toBe('waiting');
    await deploy(pinnedActor('v1'));
    await waitFor('done on v1', async () => (await row(id)).status === 'done');
    expect((await results(id)).at(-1)).toBe('after={"v":"v1"}');
  });

  it('runs an episode without a version on a versioned node, and records the version there', async () => {
    await deploy(pinnedActor(undefined));
    const id = await start(300);
    await waitFor('asleep', async () => (await row(id)).status === 'waiting');
    expect((await row(id)).version).toBeNull();
    await deploy(pinnedActor('v3'));
    await waitFor('done on v3', async () => (await row(id)).status === 'done');
    expect((await row(id)).version).toBe('v3');
  });

  it('fails boot on a bad version, naming the field', async () => {
    await expect(deploy(pinnedActor('v@1'))).rejects.toThrow(/version must be a non-empty string/);
    await expect(deploy(pinnedActor('v1', ['']))).rejects.toThrow(/accepts\[0\]/);
  });

  it('leaves a throttled episode of another version to a node that runs it', async () => {
    await deploy(limitedActor('v1'));
    const started = await node.app
      .get(Episodes)
      .trigger('pinned-limited', 'nap', { napMs: 60_000 });
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('asleep', async () => (await row(id)).status === 'waiting');
    await deploy(limitedActor('v2'));
    // As a v1 node's poll leaves a due wake-up of a limited expectation: throttled, for any node's
    // admission.
    await node.db.query(
      `UPDATE cyclium_trigger_requests SET status = 'completed' WHERE episode_id = $1
          AND status IN ('pending', 'scheduled')`,
      [id],
    );
    await node.db.query(
      `UPDATE cyclium_episodes SET status = 'throttled', queued_at = now() WHERE id = $1`,
      [id],
    );
    // A fresh episode queues behind it (limit 1, oldest first): it runs only if the admission
    // passed the pinned row over.
    const fresh = await node.app.get(Episodes).trigger('pinned-limited', 'nap', { napMs: 0 });
    if (!('episode' in fresh)) throw new Error(`not started: ${fresh.status}`);
    await waitFor(
      'the fresh one done on v2',
      async () => (await row(fresh.episode.id)).status === 'done',
    );
    expect(await row(id)).toMatchObject({ status: 'throttled', version: 'v1' });
    await deploy(limitedActor('v1'));
    await node.app.get(TriggerPoller).pollNow();
    await waitFor('admitted on v1 and asleep again', async () =>
      ['waiting', 'done'].includes((await row(id)).status),
    );
    expect((await row(id)).version).toBe('v1');
  });
});
