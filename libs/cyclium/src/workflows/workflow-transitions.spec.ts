import { describe, expect, it } from '@jest/globals';
import type { RegisteredStep, RegisteredWorkflow, StepPolicy } from './registered-workflow.js';
import {
  WorkflowTransitions,
  type EpisodeOutcome,
  type Transition,
} from './workflow-transitions.js';

function workflow(
  steps: Array<{ id: string; after?: string[]; policy?: Partial<StepPolicy> }>,
): RegisteredWorkflow {
  const map = new Map<string, RegisteredStep>();
  for (const s of steps) {
    map.set(s.id, {
      id: s.id,
      methodName: s.id,
      actorId: 'actor',
      expectationId: 'exp',
      after: s.after ?? [],
      policy: { attempts: 1, backoffMs: 0, then: 'fail_workflow', ...s.policy },
      maxAttempts: 3,
      buildInput: async () => ({}),
    });
  }
  return { id: 'wf', className: 'Wf', options: { id: 'wf' }, steps: map };
}

function ids(): () => string {
  let n = 0;
  return () => `ep-${++n}`;
}

const ended = (
  episodeId: string,
  status: EpisodeOutcome['status'],
  extra: Partial<EpisodeOutcome> = {},
): EpisodeOutcome => ({
  episodeId,
  status,
  summary: null,
  classification: null,
  errorClass: status === 'failed' ? 'Error' : null,
  errorDetail: status === 'failed' ? 'boom' : null,
  ...extra,
});

const live = (t: Transition) => ({ status: t.status, steps: t.steps });
const started = (t: Transition) => t.start.map((s) => s.stepId).sort();

describe('WorkflowTransitions', () => {
  const diamond = workflow([
    { id: 'a' },
    { id: 'b', after: ['a'] },
    { id: 'c', after: ['a'] },
    { id: 'd', after: ['b', 'c'] },
  ]);

  it('starts the roots, fans out, joins, and ends done once every step is done', () => {
    const next = ids();
    const t0 = WorkflowTransitions.begin(diamond, next);
    expect(started(t0)).toEqual(['a']);
    expect(t0.steps.b).toMatchObject({ status: 'waiting', attempts: 0 });

    const t1 = WorkflowTransitions.episodeEnded(
      diamond,
      live(t0),
      'a',
      ended('ep-1', 'done', { summary: 'a done' }),
      next,
    ) as Transition;
    expect(started(t1)).toEqual(['b', 'c']);
    expect(t1.steps.a).toMatchObject({
      status: 'done',
      result: { status: 'done', summary: 'a done', episodeId: 'ep-1' },
    });

    const b = t1.steps.b?.episodeId as string;
    const c = t1.steps.c?.episodeId as string;
    const t2 = WorkflowTransitions.episodeEnded(
      diamond,
      live(t1),
      'b',
      ended(b, 'done'),
      next,
    ) as Transition;
    expect(t2.start).toEqual([]); // d waits for c too
    const t3 = WorkflowTransitions.episodeEnded(
      diamond,
      live(t2),
      'c',
      ended(c, 'partially_failed'),
      next,
    ) as Transition;
    expect(started(t3)).toEqual(['d']);
    const t4 = WorkflowTransitions.episodeEnded(
      diamond,
      live(t3),
      'd',
      ended(t3.steps.d?.episodeId as string, 'done'),
      next,
    ) as Transition;
    expect(t4.status).toBe('done');
  });

  it(
    'ignores an event for an episode the step is not waiting on, and any event once the ' +
      'instance ended',
    () => {
      const next = ids();
      const t0 = WorkflowTransitions.begin(diamond, next);
      const t1 = WorkflowTransitions.episodeEnded(
        diamond,
        live(t0),
        'a',
        ended('ep-1', 'done'),
        next,
      ) as Transition;
      // The same event again (replayed): a is no longer running.
      expect(
        WorkflowTransitions.episodeEnded(diamond, live(t1), 'a', ended('ep-1', 'done'), next),
      ).toBeNull();
      // An episode of another attempt, or of no step at all.
      expect(
        WorkflowTransitions.episodeEnded(
          diamond,
          live(t1),
          'b',
          ended('someone-else', 'done'),
          next,
        ),
      ).toBeNull();
      expect(
        WorkflowTransitions.episodeEnded(
          diamond,
          { status: 'canceled', steps: t1.steps },
          'b',
          ended(t1.steps.b?.episodeId as string, 'done'),
          next,
        ),
      ).toBeNull();
    },
  );

  it('retries a failed step with doubling backoff, then applies its final action', () => {
    const flaky = workflow([
      { id: 'x', policy: { attempts: 3, backoffMs: 100, then: 'fail_workflow' } },
    ]);
    const next = ids();
    const t0 = WorkflowTransitions.begin(flaky, next);
    const t1 = WorkflowTransitions.episodeEnded(
      flaky,
      live(t0),
      'x',
      ended('ep-1', 'failed'),
      next,
    ) as Transition;
    expect(t1.start).toEqual([{ stepId: 'x', episodeId: 'ep-2', attempt: 2, delayMs: 100 }]);
    expect(t1.status).toBe('running');
    const t2 = WorkflowTransitions.episodeEnded(
      flaky,
      live(t1),
      'x',
      ended('ep-2', 'failed'),
      next,
    ) as Transition;
    expect(t2.start).toEqual([{ stepId: 'x', episodeId: 'ep-3', attempt: 3, delayMs: 200 }]);
    const t3 = WorkflowTransitions.episodeEnded(
      flaky,
      live(t2),
      'x',
      ended('ep-3', 'failed'),
      next,
    ) as Transition;
    expect(t3).toMatchObject({ status: 'failed', start: [], error: 'step x failed: Error: boom' });
    expect(t3.steps.x).toMatchObject({ status: 'failed', attempts: 3 });
  });

  it('does not retry a canceled episode', () => {
    const flaky = workflow([
      { id: 'x', policy: { attempts: 3, backoffMs: 100, then: 'continue' } },
    ]);
    const next = ids();
    const t0 = WorkflowTransitions.begin(flaky, next);
    const t1 = WorkflowTransitions.episodeEnded(
      flaky,
      live(t0),
      'x',
      ended('ep-1', 'canceled'),
      next,
    ) as Transition;
    expect(t1.start).toEqual([]);
    expect(t1.steps.x).toMatchObject({ status: 'failed', attempts: 1 });
    expect(t1.status).toBe('done'); // continue: nothing else to wait for
  });

  it(
    'fail_workflow fails the instance, cancels running episodes and never starts waiting ' +
      'steps',
    () => {
      const wide = workflow([
        { id: 'boom' },
        { id: 'slow' },
        { id: 'after_slow', after: ['slow'] },
      ]);
      const next = ids();
      const t0 = WorkflowTransitions.begin(wide, next);
      const boom = t0.steps.boom?.episodeId as string;
      const slow = t0.steps.slow?.episodeId as string;
      const t1 = WorkflowTransitions.episodeEnded(
        wide,
        live(t0),
        'boom',
        ended(boom, 'failed'),
        next,
      ) as Transition;
      expect(t1.status).toBe('failed');
      expect(t1.cancel).toEqual([slow]);
      expect(t1.steps.slow?.status).toBe('canceled');
      expect(t1.steps.after_slow).toMatchObject({ status: 'canceled', episodeId: null });
      expect(t1.start).toEqual([]);
    },
  );

  it('continue lets the dependants run and the instance end done', () => {
    const lenient = workflow([
      { id: 'boom', policy: { then: 'continue' } },
      { id: 'next', after: ['boom'] },
    ]);
    const nextId = ids();
    const t0 = WorkflowTransitions.begin(lenient, nextId);
    const t1 = WorkflowTransitions.episodeEnded(
      lenient,
      live(t0),
      'boom',
      ended('ep-1', 'failed'),
      nextId,
    ) as Transition;
    expect(started(t1)).toEqual(['next']);
    expect(t1.steps.boom).toMatchObject({
      status: 'failed',
      result: { status: 'failed', error: 'Error: boom' },
    });
    const t2 = WorkflowTransitions.episodeEnded(
      lenient,
      live(t1),
      'next',
      ended('ep-2', 'done'),
      nextId,
    ) as Transition;
    expect(t2.status).toBe('done');
  });

  it(
    'a step whose input cannot be built fails without an episode, and drops the starts it made ' +
      'pointless',
    () => {
      const pair = workflow([{ id: 'a' }, { id: 'b' }]);
      const next = ids();
      const t0 = WorkflowTransitions.begin(pair, next);
      const t1 = WorkflowTransitions.inputFailed(pair, t0, 'a', 'no resource', next);
      expect(t1.status).toBe('failed');
      expect(t1.steps.a).toMatchObject({
        status: 'failed',
        episodeId: null,
        error: 'input: no resource',
      });
      // b's episode was never created: it is neither started nor canceled.
      expect(t1.start).toEqual([]);
      expect(t1.cancel).toEqual([]);
    },
  );

  it('keeps a large classification out of step_states, by reference to its episode', () => {
    const one = workflow([{ id: 'a' }]);
    const next = ids();
    const t0 = WorkflowTransitions.begin(one, next);
    const big = { rows: 'x'.repeat(5_000) };
    const t1 = WorkflowTransitions.episodeEnded(
      one,
      live(t0),
      'a',
      ended('ep-1', 'done', { classification: big }),
      next,
    ) as Transition;
    expect(t1.steps.a?.classificationRef).toBe(true);
    expect(t1.steps.a?.result?.classification).toBeNull();
    expect(JSON.stringify(t1.steps).length).toBeLessThan(1_000);
  });

  it(
    'cancels a live instance: running episodes canceled, waiting steps never started; an ended ' +
      'one stays as it is',
    () => {
      const next = ids();
      const t0 = WorkflowTransitions.begin(diamond, next);
      const t1 = WorkflowTransitions.canceled(live(t0), 'by request') as Transition;
      expect(t1).toMatchObject({ status: 'canceled', cancel: ['ep-1'], error: 'by request' });
      expect(Object.values(t1.steps).map((s) => s.status)).toEqual([
        'canceled',
        'canceled',
        'canceled',
        'canceled',
      ]);
      expect(WorkflowTransitions.canceled(live(t1), 'again')).toBeNull();
    },
  );
});
