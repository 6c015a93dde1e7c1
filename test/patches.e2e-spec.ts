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

/** Code A: the steps before any patch. */
@Injectable()
@Actor({ id: 'upgrades', maxConcurrentEpisodes: 10 })
class CodeA {
  @Expectation({ id: 'flow', trigger: 'manual' })
  async flow(ep: EpisodeContext<Nap>): Promise<Convergence> {
    await ep.step('a', () => 'a');
    await ep.step('b', () => 'b');
    await ep.sleep('nap', ep.trigger.payload.napMs);
    await ep.step('c', () => 'c');
    return {};
  }
}

/** Code B: inserts a step and renames another inside patched('x'). */
@Injectable()
@Actor({ id: 'upgrades', maxConcurrentEpisodes: 10 })
class CodeB {
  @Expectation({ id: 'flow', trigger: 'manual' })
  async flow(ep: EpisodeContext<Nap>): Promise<Convergence> {
    await ep.step('a', () => 'a');
    if (ep.patched('x')) {
      await ep.step('inserted', () => 'inserted');
      await ep.step('b2', () => 'b2');
    } else {
      await ep.step('b', () => 'b');
    }
    await ep.sleep('nap', ep.trigger.payload.napMs);
    await ep.step('c', () => 'c');
    return {};
  }
}

/** What every stage after the patch runs after step `a`: B's new steps, the nap, then `c`. */
async function newSteps(ep: EpisodeContext<Nap>): Promise<Convergence> {
  await ep.step('inserted', () => 'inserted');
  await ep.step('b2', () => 'b2');
  await ep.sleep('nap', ep.trigger.payload.napMs);
  await ep.step('c', () => 'c');
  return {};
}

/** B's new steps without the patch: what a deploy without `patched` does today. */
@Injectable()
@Actor({ id: 'upgrades', maxConcurrentEpisodes: 10 })
class CodeUnpatched {
  @Expectation({ id: 'flow', trigger: 'manual' })
  async flow(ep: EpisodeContext<Nap>): Promise<Convergence> {
    await ep.step('a', () => 'a');
    return newSteps(ep);
  }
}

/** Code C: the old branch deleted, the patch deprecated. */
@Injectable()
@Actor({ id: 'upgrades', maxConcurrentEpisodes: 10 })
class CodeC {
  @Expectation({ id: 'flow', trigger: 'manual' })
  async flow(ep: EpisodeContext<Nap>): Promise<Convergence> {
    await ep.step('a', () => 'a');
    ep.deprecatePatch('x');
    return newSteps(ep);
  }
}

/** The last stage: the deprecatePatch call removed, the new branch kept. */
@Injectable()
@Actor({ id: 'upgrades', maxConcurrentEpisodes: 10 })
class CodeD {
  @Expectation({ id: 'flow', trigger: 'manual' })
  async flow(ep: EpisodeContext<Nap>): Promise<Convergence> {
    await ep.step('a', () => 'a');
    return newSteps(ep);
  }
}

/** A patch asked for inside a step. */
@Injectable()
@Actor({ id: 'misuse' })
class Misuse {
  @Expectation({ id: 'inside', trigger: 'manual' })
  async inside(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('outer', () => ep.patched('y'));
    return {};
  }
}

/** Patches, their deprecation, and a node without a patch, across "deploys" of one process. */
describe('patches: old and new code under running episodes', () => {
  const node = inProcessDeploys('upgrades-node');
  const deploy = (code: Type<unknown>) => node.deploy(code);
  const start = async (napMs: number): Promise<string> => {
    const started = await node.app.get(Episodes).trigger('upgrades', 'flow', { napMs });
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    return started.episode.id;
  };
  const row = async (id: string) =>
    (
      await node.db.query<{
        status: string;
        error_class: string | null;
        error_detail: string | null;
      }>(`SELECT status, error_class, error_detail FROM cyclium_episodes WHERE id = $1`, [id])
    ).rows[0]!;
  const steps = async (id: string) =>
    (
      await node.db.query<{ name: string }>(
        `SELECT name FROM cyclium_episode_steps WHERE episode_id = $1 AND kind = 'step'
          ORDER BY step_no`,
        [id],
      )
    ).rows.map((r) => r.name);
  const ended = (id: string) =>
    waitFor(`episode ${id} to end`, async () =>
      ['done', 'failed'].includes((await row(id)).status),
    );
  const asleep = (id: string) =>
    waitFor(`episode ${id} asleep`, async () => (await row(id)).status === 'waiting');

  it('an episode started before the patch takes the old branch, one started after the new', async () => {
    await deploy(CodeA);
    const old = await start(1500);
    await asleep(old);
    await deploy(CodeB);
    const fresh = await start(300);
    await ended(old);
    await ended(fresh);
    expect(await row(old)).toMatchObject({ status: 'done', error_class: null });
    expect(await row(fresh)).toMatchObject({ status: 'done', error_class: null });
    expect(await steps(old)).toEqual(['a', 'b', 'sleep:nap', 'c']);
    expect(await steps(fresh)).toEqual(['a', 'patch:x', 'inserted', 'b2', 'sleep:nap', 'c']);
  });

  it('without the patch the same deploy fails the old episode as nondeterministic_resume', async () => {
    await deploy(CodeA);
    const old = await start(1000);
    await asleep(old);
    await deploy(CodeUnpatched);
    await ended(old);
    expect(await row(old)).toMatchObject({
      status: 'failed',
      error_class: 'nondeterministic_resume',
    });
  });

  it('code without the patch hands an episode that took it back, and code with it finishes it', async () => {
    await deploy(CodeB);
    const patched = await start(500);
    await asleep(patched);
    // A rollback to A while it sleeps: A's node wakes it, meets the marker, and hands it back.
    await deploy(CodeA);
    await waitFor('the hand-back', async () => {
      const { rows } = await node.db.query(
        `SELECT 1 FROM cyclium_trigger_requests
          WHERE episode_id = $1 AND not_before > now() + interval '5 seconds'
            AND status IN ('pending', 'scheduled')`,
        [patched],
      );
      return rows.length === 1;
    });
    expect(await row(patched)).toMatchObject({ status: 'waiting', error_class: null });
    expect(await steps(patched)).toEqual(['a', 'patch:x', 'inserted', 'b2', 'sleep:nap']);
    await deploy(CodeB);
    // Its wake-up is 10 s away: an operator would wait; the test moves it to now.
    await node.db.query(
      `UPDATE cyclium_trigger_requests SET not_before = now() WHERE episode_id = $1
                      AND status IN ('pending', 'scheduled')`,
      [patched],
    );
    await node.app.get(TriggerPoller).pollNow();
    await ended(patched);
    expect(await row(patched)).toMatchObject({ status: 'done', error_class: null });
    expect(await steps(patched)).toEqual(['a', 'patch:x', 'inserted', 'b2', 'sleep:nap', 'c']);
  });

  it('deprecatePatch refuses an episode that needs the deleted branch, naming the patch', async () => {
    await deploy(CodeA);
    const old = await start(1000);
    await asleep(old);
    await deploy(CodeC);
    const fresh = await start(200);
    await ended(old);
    await ended(fresh);
    const refused = await row(old);
    expect(refused).toMatchObject({ status: 'failed', error_class: 'patch_deprecated' });
    expect(refused.error_detail).toContain('patch "x"');
    expect(refused.error_detail).toContain('"b"');
    expect(await steps(old)).toEqual(['a', 'b', 'sleep:nap']);
    expect(await row(fresh)).toMatchObject({ status: 'done' });
    expect(await steps(fresh)).toEqual(['a', 'patch:x', 'inserted', 'b2', 'sleep:nap', 'c']);
  });

  it('once the deprecatePatch call is removed, an episode that took the patch replays past its marker', async () => {
    await deploy(CodeC);
    const marked = await start(1000);
    await asleep(marked);
    await deploy(CodeD);
    await ended(marked);
    expect(await row(marked)).toMatchObject({ status: 'done', error_class: null });
    expect(await steps(marked)).toEqual(['a', 'patch:x', 'inserted', 'b2', 'sleep:nap', 'c']);
  });

  it('refuses patched inside a step', async () => {
    await deploy(Misuse);
    const started = await node.app.get(Episodes).trigger('misuse', 'inside', {});
    if (!('episode' in started)) throw new Error('not started');
    await ended(started.episode.id);
    const refused = await row(started.episode.id);
    expect(refused.status).toBe('failed');
    expect(refused.error_detail).toContain('call it from the method, not inside a step');
  });
});
