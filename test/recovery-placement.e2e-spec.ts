import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, Recovery, type EpisodeContext } from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ranOn: string[] = [];

/** Hosted on stack_a only: a stack_b node discovers the class but does not host the actor. */
@Injectable()
@Actor({ id: 'placed', stacks: ['stack_a'] })
class PlacedActor {
  @Expectation({ id: 'job', trigger: 'manual', recoveryPolicy: 'restart' })
  async job(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('only', () => ranOn.push(`${ep.trigger.payload.tag}@${ep.episode.ownerNode}`));
  }
}

describe('recovery only restarts an actor where it is hosted', () => {
  const database = useDatabase();
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    const bus = new LocalBus();
    const node = (id: string, stackSlug: string) =>
      startCycliumApp({
        url: database.url,
        cyclium: {
          nodeIdentity: id,
          stackSlug,
          workClaims: 'postgres',
          bus,
          recovery: { onBoot: false, staleAfterMs: 1_000 },
          triggerPollIntervalMs: 200,
        },
        providers: [PlacedActor],
      });
    [a, b] = await Promise.all([node('node-a', 'stack_a'), node('node-b', 'stack_b')]);
  });

  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  const row = async (id: string) =>
    (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];

  it('a stack_b node leaves a NULL-stack orphan of a stack_a actor for stack_a, which restarts it', async () => {
    const orphan = await b.get(Episodes).create({
      actorId: 'placed',
      expectationId: 'job',
      payload: { tag: 'legacy' },
      sourceStack: null,
      startedAt: new Date(Date.now() - 60_000),
      ownerNode: 'node-dead',
    });
    // Its own sweep does not even read what it cannot run: a restart of an actor it does not host.
    expect(await b.get(Recovery).sweep()).toMatchObject({ restarted: 0, failed: 0, skipped: 0 });
    expect(await row(orphan.id)).toMatchObject({
      status: 'running',
      attempts: 0,
      phase: null,
      owner_node: 'node-dead',
    });

    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    await waitFor('stack_a to finish it', async () => (await row(orphan.id)).status === 'done');
    expect(await row(orphan.id)).toMatchObject({ attempts: 1, owner_node: 'node-a' });
    expect(ranOn).toContain('legacy@node-a');
  });

  it("a sweep of stack_a's rows from stack_b defers the restart to stack_a as a trigger request, which runs it", async () => {
    const orphan = await b.get(Episodes).create({
      actorId: 'placed',
      expectationId: 'job',
      payload: { tag: 'crossed' },
      sourceStack: 'stack_a',
      startedAt: new Date(Date.now() - 60_000),
      ownerNode: 'node-dead',
    });
    expect(await b.get(Recovery).sweep({ sourceStack: 'stack_a' })).toMatchObject({
      restarted: 0,
      deferred: 1,
      failed: 0,
    });
    expect(await row(orphan.id)).toMatchObject({
      status: 'deferred',
      attempts: 1,
      owner_node: null,
    });
    const requests = (
      await database.db.query(
        `SELECT source_node, source_stack, opts FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [orphan.id],
      )
    ).rows;
    expect(requests).toEqual([
      { source_node: 'node-b', source_stack: 'stack_a', opts: { resume: true } },
    ]);
    await waitFor(
      'stack_a to run it from its request',
      async () => (await row(orphan.id)).status === 'done',
      10_000,
    );
    expect(await row(orphan.id)).toMatchObject({ owner_node: 'node-a', attempts: 1 });
    expect(ranOn).toContain('crossed@node-a');
    const done = (
      await database.db.query(
        `SELECT status, claimed_by FROM cyclium_trigger_requests WHERE episode_id = $1`,
        [orphan.id],
      )
    ).rows;
    expect(done).toEqual([{ status: 'completed', claimed_by: 'node-a' }]);
  });

  it('adopts a queued episode of a gone node only where its actor is hosted: never strands it on a node that cannot run it', async () => {
    const queued = await b.get(Episodes).create({
      actorId: 'placed',
      expectationId: 'job',
      payload: { tag: 'backlog' },
      status: 'queued',
      sourceStack: 'stack_a',
      ownerNode: 'node-gone',
    });
    // stack_b sweeps stack_a's scope: the row keeps its (gone) owner, adoptable by the right node.
    await b.get(Recovery).sweep({ sourceStack: 'stack_a' });
    expect(await row(queued.id)).toMatchObject({ status: 'queued', owner_node: 'node-gone' });

    expect(await a.get(Recovery).sweep()).toMatchObject({ restarted: 1 });
    await waitFor(
      'the adopted episode to run on stack_a',
      async () => (await row(queued.id)).status === 'done',
    );
    expect(await row(queued.id)).toMatchObject({ owner_node: 'node-a' });
  });
});
