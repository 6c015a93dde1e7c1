/**
 * An episode's lifecycle events go where its own stack reads, whichever node ran it. A full node's
 * trigger poller takes every stack's requests by default, so a workflow step of stack_a can run on
 * a node of stack_b: its `episode.completed` must still reach stack_a's channel, or stack_a's
 * workflow engine never hears the step end and the instance waits for the next reconciliation.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Bus,
  Expectation,
  Workflow,
  WorkflowEngine,
  WorkflowStep,
  type BusEvent,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Hosted on stack_b's nodes only: a step of a stack_a workflow runs there. */
@Injectable()
@Actor({ id: 'scoped_worker', stacks: ['stack_b'] })
class ScopedWorker {
  @Expectation({ id: 'work', trigger: 'workflow' })
  async work(ep: EpisodeContext): Promise<{ summary: string }> {
    await ep.step('only', () => 1);
    return { summary: 'worked' };
  }
}

@Injectable()
@Workflow({ id: 'scoped_flow' })
class ScopedFlow {
  @WorkflowStep({ actor: 'scoped_worker', expectation: 'work' })
  only(): Record<string, never> {
    return {};
  }
}

const NODE = {
  workClaims: 'postgres' as const,
  triggerPollIntervalMs: 200,
  // No sweep, so no reconciliation: only the live event can advance the instance.
  recovery: { onBoot: false },
};

function scenario(title: string, extra: Record<string, unknown>): void {
  describe(title, () => {
    const database = useDatabase();
    let a: INestApplicationContext;
    let b: INestApplicationContext;
    const heardOnA: Array<BusEvent<{ episodeId?: string }>> = [];

    beforeAll(async () => {
      [a, b] = await Promise.all(
        (['stack_a', 'stack_b'] as const).map((stackSlug) =>
          startCycliumApp({
            url: database.url,
            cyclium: { ...NODE, ...extra, stackSlug, nodeIdentity: `scope-${stackSlug}` },
            providers: [ScopedWorker, ScopedFlow],
          }),
        ),
      );
      a.get(Bus).subscribe<{ episodeId?: string }>('episode.completed', (event) => {
        heardOnA.push(event);
      });
    });

    afterAll(async () => {
      await Promise.all([a?.close(), b?.close()]);
    });

    it("go to the episode's own stack: its workflow advances and its subscribers hear the end", async () => {
      const id = await a.get(WorkflowEngine).start('scoped_flow', {});
      const instance = await waitFor(
        'the stack_a instance to finish',
        async () => {
          const { rows } = await database.db.query(
            `SELECT status, source_stack, step_states FROM cyclium_workflow_instances WHERE id = $1`,
            [id],
          );
          return rows[0]?.status === 'running' ? null : rows[0];
        },
        10_000,
      );
      expect(instance).toMatchObject({ status: 'done', source_stack: 'stack_a' });
      const episodeId = instance.step_states.only.episodeId as string;
      const { rows: episodes } = await database.db.query(
        `SELECT owner_node, source_stack, status FROM cyclium_episodes WHERE id = $1`,
        [episodeId],
      );
      // The step ran on stack_b's node (the only one that hosts its actor)...
      expect(episodes[0]).toMatchObject({
        owner_node: 'scope-stack_b',
        source_stack: 'stack_a',
        status: 'done',
      });
      // ...and its end was written on stack_a's channel, stamped with stack_a.
      const { rows: events } = await database.db.query(
        `SELECT channel, source_stack, publisher FROM cyclium_events
        WHERE type = 'episode.completed' AND payload->>'episodeId' = $1`,
        [episodeId],
      );
      expect(events).toEqual([
        {
          channel: busChannel('stack_a', null),
          source_stack: 'stack_a',
          publisher: 'scope-stack_b',
        },
      ]);
      await waitFor('stack_a to hear the end', async () =>
        heardOnA.some((e) => e.payload?.episodeId === episodeId),
      );
    });
  });
}

scenario('lifecycle events of an episode run for another stack', {});
// Signed for the channel they are written on, so stack_a's nodes accept them.
scenario('lifecycle events of an episode run for another stack, with integrity', {
  integrity: { keyId: 'k1', keys: { k1: 'lifecycle-scope-secret-0123456789' } },
});
