import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Bus,
  Expectation,
  Recovery,
  Workflow,
  WorkflowEngine,
  WorkflowStep,
  type Convergence,
  type EpisodeContext,
  type WorkflowStepContext,
} from '@cyclium/nestjs';
import { EventOutbox } from '../libs/cyclium/src/bus/event-outbox.service.js';
import { lifecycleEvent } from '../libs/cyclium/src/episodes/episode-events.js';
import { EpisodeStore } from '../libs/cyclium/src/episodes/episode-store.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Failures left per instance for `flaky` (both nodes live in this process, so they share it). */
const failuresLeft = new Map<string, number>();
/** `gated` steps wait until the test opens their gate (keyed by the step input's `gate`). */
const gates = new Map<string, { open: () => void; opened: Promise<void> }>();
function gate(name: string) {
  let entry = gates.get(name);
  if (!entry) {
    let open = () => undefined as void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    entry = { open, opened };
    gates.set(name, entry);
  }
  return entry;
}

interface Work {
  label: string;
  instance?: string;
  gate?: string;
  seen?: unknown;
}

@Injectable()
@Actor({ id: 'wf_worker', maxConcurrentEpisodes: 10 })
class WorkerActor {
  @Expectation({ id: 'collect', trigger: 'workflow' })
  async collect(ep: EpisodeContext<Work>): Promise<Convergence> {
    const { label, seen } = ep.trigger.payload;
    await ep.step('collect', () => label);
    return {
      summary: `collected ${label}`,
      classification: { label, seen: seen ?? null, node: ep.episode.ownerNode },
    };
  }

  @Expectation({ id: 'flaky', trigger: 'workflow' })
  async flaky(ep: EpisodeContext<Work>): Promise<Convergence> {
    const key = ep.trigger.payload.instance as string;
    const left = failuresLeft.get(key) ?? 0;
    if (left > 0) {
      failuresLeft.set(key, left - 1);
      throw new Error(`flaky: ${left} failure(s) left`);
    }
    return { summary: 'worked at last' };
  }

  /** `flaky` with an episode-level retry policy of its own: two attempts, 100 ms apart. */
  @Expectation({
    id: 'flaky_retried',
    trigger: 'workflow',
    retry: { attempts: 2, backoff: { initialMs: 100, factor: 1 } },
  })
  flakyRetried(ep: EpisodeContext<Work>): Promise<Convergence> {
    return this.flaky(ep);
  }

  @Expectation({ id: 'boom', trigger: 'workflow' })
  async boom(): Promise<Convergence> {
    throw new Error('boom');
  }

  @Expectation({ id: 'gated', trigger: 'workflow' })
  async gated(ep: EpisodeContext<Work>): Promise<Convergence> {
    await ep.step('wait', () =>
      Promise.race([gate(ep.trigger.payload.gate as string).opened, aborted(ep.signal)]),
    );
    await ep.step('after', () => 'passed');
    return { summary: `through ${ep.trigger.payload.gate}` };
  }

  /** Sleeps far past the test: `waiting`, with its wake-up `scheduled`. */
  @Expectation({ id: 'napping', trigger: 'workflow' })
  async napping(ep: EpisodeContext<Work>): Promise<Convergence> {
    await ep.sleep('nap', 3_600_000);
    return { summary: 'rested' };
  }

  /** Waits for a signal that never comes: `waiting`, with its deadline's wake-up `scheduled`. */
  @Expectation({ id: 'awaiting', trigger: 'workflow' })
  async awaiting(ep: EpisodeContext<Work>): Promise<Convergence> {
    await ep.waitForSignal('go', { timeoutMs: 3_600_000 });
    return { summary: 'went' };
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) =>
    signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
  );
}

interface FanIn {
  tag: string;
}

@Injectable()
@Workflow({ id: 'fan_out' })
class FanOutWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect' })
  first({ input }: WorkflowStepContext<FanIn>): Work {
    return { label: `${input.tag}/first` };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['first'] })
  left({ results }: WorkflowStepContext<FanIn>): Work {
    return { label: 'left', seen: results.first?.summary };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['first'] })
  right({ results }: WorkflowStepContext<FanIn>): Work {
    return { label: 'right', seen: results.first?.summary };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['left', 'right'] })
  join({ results }: WorkflowStepContext<FanIn>): Work {
    return { label: 'join', seen: [results.left?.classification, results.right?.classification] };
  }
}

@Injectable()
@Workflow({ id: 'retrying' })
class RetryingWorkflow {
  @WorkflowStep({
    actor: 'wf_worker',
    expectation: 'flaky',
    onFailure: { retry: { attempts: 3, backoffMs: 300 } },
  })
  attempt({ input }: WorkflowStepContext<{ key: string }>): Work {
    return { label: 'flaky', instance: input.key };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['attempt'] })
  report({ results }: WorkflowStepContext): Work {
    return { label: 'report', seen: results.attempt?.summary };
  }
}

/** A step whose episode retries on its own, under a step retry policy: the two compose. */
@Injectable()
@Workflow({ id: 'retrying_twice' })
class RetryingTwiceWorkflow {
  @WorkflowStep({
    actor: 'wf_worker',
    expectation: 'flaky_retried',
    onFailure: { retry: { attempts: 2, backoffMs: 100 } },
  })
  attempt({ input }: WorkflowStepContext<{ key: string }>): Work {
    return { label: 'flaky', instance: input.key };
  }
}

@Injectable()
@Workflow({ id: 'failing' })
class FailingWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'gated' })
  slow({ instanceId }: WorkflowStepContext): Work {
    return { label: 'slow', gate: `failing:${instanceId}` };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['slow'] })
  afterSlow(): Work {
    return { label: 'never' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'boom' })
  explode(): Work {
    return { label: 'boom' };
  }
}

@Injectable()
@Workflow({ id: 'lenient' })
class LenientWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'boom', onFailure: 'continue' })
  explode(): Work {
    return { label: 'boom' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['explode'] })
  carryOn({ results }: WorkflowStepContext): Work {
    return { label: 'carry on', seen: results.explode?.status };
  }
}

@Injectable()
@Workflow({ id: 'per_subject', subjectKey: 'resource' })
class PerSubjectWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'gated' })
  hold({ input }: WorkflowStepContext<{ resource: string }>): Work {
    return { label: 'hold', gate: `subject:${input.resource}` };
  }
}

@Injectable()
@Workflow({ id: 'two_step' })
class TwoStepWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect' })
  one(): Work {
    return { label: 'one' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'gated', after: ['one'] })
  two({ instanceId }: WorkflowStepContext): Work {
    return { label: 'two', gate: `two:${instanceId}` };
  }
}

/** Three steps at once: one sleeping, one waiting for a signal, one running until canceled. */
@Injectable()
@Workflow({ id: 'resting' })
class RestingWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'napping' })
  nap(): Work {
    return { label: 'nap' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'awaiting' })
  hold(): Work {
    return { label: 'hold' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'gated' })
  busy({ instanceId }: WorkflowStepContext): Work {
    return { label: 'busy', gate: `resting:${instanceId}` };
  }
}

@Injectable()
/** No subject: only the id derived from the event keeps the two nodes that hear it from starting two instances. */
@Workflow({ id: 'on_event', trigger: { event: 'wf_test.requested', filter: { kind: 'review' } } })
class OnEventWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect' })
  only({ input }: WorkflowStepContext<{ resource: string }>): Work {
    return { label: input.resource };
  }
}

const PROVIDERS = [
  WorkerActor,
  FanOutWorkflow,
  RetryingWorkflow,
  RetryingTwiceWorkflow,
  FailingWorkflow,
  LenientWorkflow,
  PerSubjectWorkflow,
  TwoStepWorkflow,
  OnEventWorkflow,
  RestingWorkflow,
];
const NODE = {
  workClaims: 'postgres' as const,
  triggerPollIntervalMs: 200,
  recovery: { onBoot: false },
};

describe('workflows on two nodes', () => {
  const database = useDatabase();
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    [a, b] = await Promise.all([
      startCycliumApp({
        url: database.url,
        cyclium: { ...NODE, nodeIdentity: 'wf-a' },
        providers: PROVIDERS,
      }),
      startCycliumApp({
        url: database.url,
        cyclium: { ...NODE, nodeIdentity: 'wf-b' },
        providers: PROVIDERS,
      }),
    ]);
  });

  afterAll(async () => {
    for (const entry of gates.values()) entry.open();
    await Promise.all([a?.close(), b?.close()]);
  });

  const rows = async (sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows;
  const instance = async (id: string) =>
    (await rows(`SELECT * FROM cyclium_workflow_instances WHERE id = $1`, [id]))[0];
  const episodesOf = (id: string) =>
    rows(
      `SELECT id, workflow_step_id, status, trigger_type, trigger_ref, classification, owner_node, inserted_at, started_at, finished_at, error_class
         FROM cyclium_episodes WHERE workflow_instance_id = $1 ORDER BY inserted_at, id`,
      [id],
    );
  const finished = (id: string, timeoutMs = 20_000) =>
    waitFor(
      `workflow instance ${id} to finish`,
      async () => {
        const row = await instance(id);
        return row && !['running', 'blocked'].includes(row.status) ? row : null;
      },
      timeoutMs,
    );

  it('a three-level workflow with a fan-out completes: each step runs once, after its dependencies, with their results', async () => {
    const id = await a.get(WorkflowEngine).start('fan_out', { tag: 'fan' });
    const done = await finished(id);
    expect(done.status).toBe('done');
    expect(done.version).toBe(5); // created, then one advance per step: nothing applied twice
    const episodes = await episodesOf(id);
    expect(episodes.map((e) => e.workflow_step_id).sort()).toEqual([
      'first',
      'join',
      'left',
      'right',
    ]);
    for (const e of episodes) expect(e).toMatchObject({ status: 'done', trigger_type: 'workflow' });
    const by = Object.fromEntries(episodes.map((e) => [e.workflow_step_id, e]));
    for (const branch of ['left', 'right']) {
      expect(by[branch].started_at.getTime()).toBeGreaterThanOrEqual(
        by.first.finished_at.getTime(),
      );
      expect(by.join.started_at.getTime()).toBeGreaterThanOrEqual(by[branch].finished_at.getTime());
      expect(by[branch].trigger_ref.payload).toEqual({
        label: branch,
        seen: 'collected fan/first',
      });
    }
    // The join's input was built from both branches' results (their classifications).
    const joined = by.join.trigger_ref.payload.seen as Array<{ label: string }>;
    expect(joined.map((c) => c.label)).toEqual(['left', 'right']);
    expect(done.step_states.join).toMatchObject({
      status: 'done',
      attempts: 1,
      episodeId: by.join.id,
    });
  });

  it('a failing step with retry is started again after its backoff, then succeeds, and the workflow goes on', async () => {
    failuresLeft.set('retry-1', 2);
    const id = await b.get(WorkflowEngine).start('retrying', { key: 'retry-1' });
    const done = await finished(id, 30_000);
    expect(done.status).toBe('done');
    const attempts = (await episodesOf(id)).filter((e) => e.workflow_step_id === 'attempt');
    expect(attempts.map((e) => e.status)).toEqual(['failed', 'failed', 'done']);
    expect(done.step_states.attempt).toMatchObject({ status: 'done', attempts: 3 });
    // Backoff by the database clock: 300 ms before the second attempt, 600 ms before the third.
    const gap = (i: number) =>
      attempts[i].started_at.getTime() - attempts[i - 1].finished_at.getTime();
    expect(gap(1)).toBeGreaterThanOrEqual(300 - 5);
    expect(gap(2)).toBeGreaterThanOrEqual(600 - 5);
    const report = (await episodesOf(id)).find((e) => e.workflow_step_id === 'report');
    expect(report.trigger_ref.payload).toEqual({ label: 'report', seen: 'worked at last' });
  });

  it("a step's episode exhausts its own retries first: only its final failure counts as one failure of the workflow step", async () => {
    // Three failures: the first episode fails both its attempts (one step failure), the second fails once and then succeeds.
    failuresLeft.set('retry-2', 3);
    const id = await a.get(WorkflowEngine).start('retrying_twice', { key: 'retry-2' });
    const done = await finished(id, 30_000);
    expect(done.status).toBe('done');
    const ids = (await episodesOf(id))
      .filter((e) => e.workflow_step_id === 'attempt')
      .map((e) => e.id);
    const attempts = await rows(
      `SELECT status, retries, error_detail FROM cyclium_episodes WHERE id = ANY($1::uuid[]) ORDER BY inserted_at, id`,
      [ids],
    );
    expect(attempts.map((e) => [e.status, e.retries])).toEqual([
      ['failed', 1],
      ['done', 1],
    ]);
    expect(attempts[0].error_detail).toMatch(/^attempt 2 of 2: /);
    expect(done.step_states.attempt).toMatchObject({ status: 'done', attempts: 2 });
    expect(failuresLeft.get('retry-2')).toBe(0);
  });

  it('fail_workflow fails the instance, cancels the running step and never starts the waiting one', async () => {
    const id = await a.get(WorkflowEngine).start('failing', {});
    const failed = await finished(id);
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe('step explode failed: crash: boom');
    const episodes = await episodesOf(id);
    expect(episodes.map((e) => e.workflow_step_id).sort()).toEqual(['explode', 'slow']);
    await waitFor(
      'the slow step to stop',
      async () =>
        (await episodesOf(id)).find((e) => e.workflow_step_id === 'slow').status === 'canceled',
    );
    expect(failed.step_states).toMatchObject({
      explode: { status: 'failed' },
      slow: { status: 'canceled' },
      afterSlow: { status: 'canceled', episodeId: null, attempts: 0 },
    });
  });

  it('continue lets the steps after a failed one run, and the instance ends done', async () => {
    const id = await b.get(WorkflowEngine).start('lenient', {});
    const done = await finished(id);
    expect(done.status).toBe('done');
    expect(done.step_states.explode).toMatchObject({
      status: 'failed',
      result: { status: 'failed' },
    });
    const carry = (await episodesOf(id)).find((e) => e.workflow_step_id === 'carryOn');
    expect(carry).toMatchObject({ status: 'done' });
    expect(carry.trigger_ref.payload.seen).toBe('failed');
  });

  it('refuses a subject longer than its index entry allows, counted in bytes, before writing', async () => {
    // 1,000 characters but 3,000 bytes: a limit in characters let this through to the unique index, which refused it.
    await expect(
      a.get(WorkflowEngine).start('per_subject', { resource: '€'.repeat(1_000) }),
    ).rejects.toThrow(/at most 1000 bytes/);
    const rows = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_workflow_instances WHERE length(subject_value) = 1000`,
    );
    expect(rows.rows[0].n).toBe(0);
  });

  it('two nodes starting one workflow for one subject at the same moment get one instance; a start after it ended gets a new one', async () => {
    const subjects = Array.from({ length: 10 }, (_, i) => `disk-${i}`);
    const starts = await Promise.all(
      subjects.flatMap((resource) =>
        [a, b, a, b].map((node) => node.get(WorkflowEngine).start('per_subject', { resource })),
      ),
    );
    for (let i = 0; i < subjects.length; i++)
      expect(new Set(starts.slice(i * 4, i * 4 + 4)).size).toBe(1);
    const counts = await rows(
      `SELECT subject_value, count(*)::int AS n FROM cyclium_workflow_instances WHERE workflow_id = 'per_subject' GROUP BY subject_value`,
    );
    expect(counts).toHaveLength(subjects.length);
    for (const c of counts) expect(c.n).toBe(1);
    const first = starts[0] as string;
    expect((await episodesOf(first)).length).toBe(1);

    gate('subject:disk-0').open();
    expect((await finished(first)).status).toBe('done');
    const second = await b.get(WorkflowEngine).start('per_subject', { resource: 'disk-0' });
    expect(second).not.toBe(first);
    expect((await instance(second)).status).toBe('running');
    for (const s of subjects) gate(`subject:${s}`).open();
    // Every instance ends here: the next case's reconciliation counts the replays of every live
    // instance, and one whose step has just ended is replayed (a fresh clone of 104421f read 3).
    await Promise.all([...new Set(starts), second].map((id) => finished(id)));
  });

  it('a replayed terminal event does not advance a step twice', async () => {
    const id = await a.get(WorkflowEngine).start('two_step', {});
    await waitFor(
      'step two to run',
      async () => (await instance(id)).step_states.two.status === 'running',
    );
    const [one] = (await episodesOf(id)).filter((e) => e.workflow_step_id === 'one');
    const versionBefore = (await instance(id)).version;
    // The terminal event of step one again, three times, heard by both nodes (every node listens).
    const row = await a.get(EpisodeStore).get(one.id);
    const event = lifecycleEvent(
      'episode.completed',
      row as NonNullable<typeof row>,
      'done',
      'test',
    );
    for (let i = 0; i < 3; i++) await a.get(EventOutbox).publish(event.type, event.payload);
    // Reconciliation of a live instance whose running step has not finished replays nothing.
    expect(await b.get(Recovery).reconcileWorkflows()).toEqual({
      replayed: 0,
      skipped: expect.any(Number),
    });

    // Each node applies one instance's events in order, so once step two's end is applied the
    // replays (published before it) have been handled.
    gate(`two:${id}`).open();
    const done = await finished(id);
    expect(done.status).toBe('done');
    expect(done.version).toBe(versionBefore + 1);
    const episodes = await episodesOf(id);
    expect(episodes.map((e) => e.workflow_step_id)).toEqual(['one', 'two']);
    expect(done.step_states.one).toMatchObject({ status: 'done', attempts: 1 });
  });

  it('an event-triggered workflow starts once per event across the nodes that hear it, and only for matching events', async () => {
    const bus = a.get(Bus);
    await bus.publish('wf_test.requested', { kind: 'other', resource: 'ignored' });
    const event = await bus.publish('wf_test.requested', { kind: 'review', resource: 'db-1' });
    const row = await waitFor(
      'the instance',
      async () =>
        (await rows(`SELECT * FROM cyclium_workflow_instances WHERE workflow_id = 'on_event'`))[0],
    );
    expect((await finished(row.id)).status).toBe('done');
    expect(row).toMatchObject({ subject_value: null, input: event.payload });
    await bus.publish('wf_test.requested', { kind: 'review', resource: 'db-2' });
    await waitFor(
      'the second instance',
      async () =>
        (await rows(`SELECT 1 FROM cyclium_workflow_instances WHERE input->>'resource' = 'db-2'`))
          .length > 0,
    );
    // Both nodes heard both events and each was applied once (the second one's instance is done by the time both handled it).
    await waitFor(
      'both instances to finish',
      async () =>
        (
          await rows(
            `SELECT 1 FROM cyclium_workflow_instances WHERE workflow_id = 'on_event' AND status = 'done'`,
          )
        ).length === 2,
    );
    const all = await rows(
      `SELECT input->>'resource' AS resource FROM cyclium_workflow_instances WHERE workflow_id = 'on_event' ORDER BY inserted_at`,
    );
    expect(all.map((r) => r.resource)).toEqual(['db-1', 'db-2']);
  });

  it('one event id published in two stacks starts one instance in each, each stamped with its stack', async () => {
    const [c, d] = await Promise.all(
      (['stack_a', 'stack_b'] as const).map((stackSlug) =>
        startCycliumApp({
          url: database.url,
          cyclium: { ...NODE, stackSlug, nodeIdentity: `wf-${stackSlug}` },
          providers: PROVIDERS,
        }),
      ),
    );
    try {
      for (const app of [c, d])
        await app
          .get(Bus)
          .publish(
            'wf_test.requested',
            { kind: 'review', resource: 'both-stacks' },
            { eventId: 'shared-delivery-1' },
          );
      const started = await waitFor(
        'an instance in each stack',
        async (): Promise<Array<{ id: string; source_stack: string }> | null> => {
          const found = await rows(
            `SELECT id, source_stack, status FROM cyclium_workflow_instances WHERE input->>'resource' = 'both-stacks' ORDER BY source_stack`,
          );
          return found.length === 2 ? found : null;
        },
      );
      expect(started?.map((r) => r.source_stack)).toEqual(['stack_a', 'stack_b']);
      for (const { id } of started ?? []) expect((await finished(id)).status).toBe('done');
    } finally {
      await Promise.all([c.close(), d.close()]);
    }
  });

  it('cancel stops a running instance: its running step episode is canceled, nothing else starts', async () => {
    const id = await b.get(WorkflowEngine).start('two_step', {});
    await waitFor('step two to run', async () => {
      const two = (await episodesOf(id)).find((e) => e.workflow_step_id === 'two');
      return two?.status === 'running';
    });
    expect(await a.get(WorkflowEngine).cancel(id)).toBe('canceled');
    expect(await a.get(WorkflowEngine).cancel(id)).toBe('finished');
    expect(await a.get(WorkflowEngine).cancel('00000000-0000-4000-8000-000000000000')).toBe(
      'not_found',
    );
    await waitFor(
      'step two to stop',
      async () =>
        (await episodesOf(id)).find((e) => e.workflow_step_id === 'two').status === 'canceled',
    );
    expect(await instance(id)).toMatchObject({ status: 'canceled', error: 'canceled by request' });
  });

  it('cancel ends its sleeping and waiting step episodes with their wake-ups, in one commit; a running step stops at its next step', async () => {
    const id = await a.get(WorkflowEngine).start('resting', {});
    const requestsOf = (episodeId: string) =>
      rows(
        `SELECT status, error, opts ->> 'wake' AS wake FROM cyclium_trigger_requests
          WHERE episode_id = $1 AND status IN ('pending', 'scheduled', 'completed')
            AND (opts ->> 'wake') IS NOT NULL
          ORDER BY inserted_at, id`,
        [episodeId],
      );
    const steps = await waitFor(
      'the sleep and the wait to be scheduled, the busy step to run',
      async () => {
        const by = Object.fromEntries((await episodesOf(id)).map((e) => [e.workflow_step_id, e]));
        if (by.busy?.status !== 'running') return null;
        for (const step of ['nap', 'hold']) {
          if (by[step]?.status !== 'waiting') return null;
          if ((await requestsOf(by[step].id))[0]?.status !== 'scheduled') return null;
        }
        return by;
      },
    );
    expect(await requestsOf(steps.nap.id)).toEqual([
      { status: 'scheduled', error: null, wake: 'sleep' },
    ]);
    expect(await requestsOf(steps.hold.id)).toEqual([
      { status: 'scheduled', error: null, wake: 'wait' },
    ]);

    expect(await b.get(WorkflowEngine).cancel(id)).toBe('canceled');
    // Read as soon as the cancel answers: the wake-ups ended with the episodes, in the same commit.
    for (const step of ['nap', 'hold']) {
      const [episode] = await rows(`SELECT status FROM cyclium_episodes WHERE id = $1`, [
        steps[step].id,
      ]);
      expect(episode.status).toBe('canceled');
      expect(
        await rows(
          `SELECT id FROM cyclium_trigger_requests
            WHERE episode_id = $1 AND status IN ('pending', 'scheduled')`,
          [steps[step].id],
        ),
      ).toEqual([]);
      expect((await requestsOf(steps[step].id)).map((r) => [r.status, r.error])).toEqual([
        ['completed', 'its episode was canceled'],
      ]);
    }
    await waitFor(
      'the busy step to stop',
      async () =>
        (await episodesOf(id)).find((e) => e.workflow_step_id === 'busy').status === 'canceled',
    );
    // It was running when canceled: only asked to stop, so nothing of its requests was ended.
    expect(
      await rows(
        `SELECT id FROM cyclium_trigger_requests
          WHERE episode_id = $1 AND error = 'its episode was canceled'`,
        [steps.busy.id],
      ),
    ).toEqual([]);
    expect(await instance(id)).toMatchObject({ status: 'canceled', error: 'canceled by request' });
  });
});

describe('workflows with claims off: the version the advance is conditional on is the only guard', () => {
  const database = useDatabase();
  let nodes: INestApplicationContext[] = [];

  beforeAll(async () => {
    const off = { ...NODE, workClaims: false as const };
    nodes = await Promise.all(
      ['wf-x', 'wf-y', 'wf-z'].map((nodeIdentity) =>
        startCycliumApp({
          url: database.url,
          cyclium: { ...off, nodeIdentity },
          providers: PROVIDERS,
        }),
      ),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.close()));
  });

  it('three nodes hearing every event of 20 fan-outs at once still apply each event once', async () => {
    const ids = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (nodes[i % 3] as INestApplicationContext)
          .get(WorkflowEngine)
          .start('fan_out', { tag: `x${i}` }),
      ),
    );
    await waitFor(
      'every fan-out to finish',
      async () => {
        const { rows } = await database.db.query(
          `SELECT count(*)::int AS n FROM cyclium_workflow_instances WHERE id = ANY($1) AND status = 'done'`,
          [ids],
        );
        return rows[0].n === ids.length;
      },
      60_000,
      100,
    );
    const { rows: versions } = await database.db.query(
      `SELECT DISTINCT version FROM cyclium_workflow_instances WHERE id = ANY($1)`,
      [ids],
    );
    expect(versions).toEqual([{ version: 5 }]);
    const { rows: episodes } = await database.db.query(
      `SELECT workflow_instance_id, count(*)::int AS n, count(DISTINCT workflow_step_id)::int AS steps
         FROM cyclium_episodes WHERE workflow_instance_id = ANY($1) GROUP BY workflow_instance_id`,
      [ids],
    );
    expect(episodes).toHaveLength(20);
    for (const e of episodes) expect({ n: e.n, steps: e.steps }).toEqual({ n: 4, steps: 4 });
  });
});

@Injectable()
@Workflow({ id: 'unknown_actor' })
class UnknownActorWorkflow {
  @WorkflowStep({ actor: 'nobody', expectation: 'collect' })
  only(): Work {
    return { label: 'x' };
  }
}

@Injectable()
@Workflow({ id: 'unknown_expectation' })
class UnknownExpectationWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'nothing_like_it' })
  only(): Work {
    return { label: 'x' };
  }
}

@Injectable()
@Workflow({ id: 'cyclic' })
class CyclicWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['c'] })
  a(): Work {
    return { label: 'a' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['a'] })
  b(): Work {
    return { label: 'b' };
  }

  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['b'] })
  c(): Work {
    return { label: 'c' };
  }
}

@Injectable()
@Workflow({ id: 'dangling' })
class DanglingWorkflow {
  @WorkflowStep({ actor: 'wf_worker', expectation: 'collect', after: ['missing'] })
  only(): Work {
    return { label: 'x' };
  }
}

@Injectable()
@Workflow({ id: 'bad_policy' })
class BadPolicyWorkflow {
  @WorkflowStep({
    actor: 'wf_worker',
    expectation: 'collect',
    onFailure: { retry: { attempts: 0 } },
  })
  only(): Work {
    return { label: 'x' };
  }
}

describe('invalid workflow graphs fail boot, naming the class and step', () => {
  const database = useDatabase();

  it.each([
    [
      'an unknown actor',
      UnknownActorWorkflow,
      /@WorkflowStep on UnknownActorWorkflow\.only: unknown actor "nobody"/,
    ],
    [
      'an unknown expectation',
      UnknownExpectationWorkflow,
      /UnknownExpectationWorkflow\.only: actor "wf_worker" has no expectation "nothing_like_it"/,
    ],
    [
      'a cycle',
      CyclicWorkflow,
      /@Workflow cyclic \(CyclicWorkflow\): steps depend on each other in a cycle: a → c → b → a/,
    ],
    [
      'a missing dependency',
      DanglingWorkflow,
      /step "only" runs after "missing", which is not a step of this workflow/,
    ],
    [
      'a retry of zero attempts',
      BadPolicyWorkflow,
      /onFailure\.retry\.attempts must be a whole number >= 1/,
    ],
  ])('%s', async (_what, workflow, message) => {
    await expect(
      startCycliumApp({
        url: database.url,
        cyclium: { ...NODE, nodeIdentity: 'wf-bad' },
        providers: [WorkerActor, workflow],
      }),
    ).rejects.toThrow(message);
  });
});
