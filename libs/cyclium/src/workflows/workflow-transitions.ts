import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { RegisteredWorkflow } from './registered-workflow.js';
import type { WorkflowInstanceStatus } from '../entities/workflow-instance.entity.js';
import type { StepResult, StepState } from '../entities/workflow-step-state.js';

/** A step episode to create: the current attempt of `stepId`, not to be taken before `delayMs`. */
export interface StepStart {
  stepId: string;
  episodeId: string;
  attempt: number;
  delayMs: number;
}

/** What an instance becomes, and the episodes that change with it. */
export interface Transition {
  status: WorkflowInstanceStatus;
  steps: Record<string, StepState>;
  error: string | null;
  start: StepStart[];
  /** Episodes of steps the instance no longer waits for (it ended): cancel them. */
  cancel: string[];
}

/** How a step's episode ended, read from its row. */
export interface EpisodeOutcome {
  episodeId: string;
  status: Extract<EpisodeStatus, 'done' | 'partially_failed' | 'failed' | 'canceled'>;
  summary: string | null;
  classification: unknown;
  errorClass: string | null;
  errorDetail: string | null;
}

export const TERMINAL_EPISODE_STATUSES: ReadonlySet<string> = new Set([
  'done',
  'partially_failed',
  'failed',
  'canceled',
]);

const FINISHED: ReadonlySet<string> = new Set(['done', 'failed', 'canceled']);

/**
 * Above this, a result's classification stays in its episode row and step_states keeps a reference.
 */
export const INLINE_CLASSIFICATION_BYTES = 2_048;

/** A detail's first line (an error's message, not its stack), bounded: step_states stays small. */
function firstLine(detail: string | null): string | null {
  if (!detail) return null;
  const line = detail.split('\n', 1)[0] as string;
  return line.length > 500 ? `${line.slice(0, 500)}…` : line;
}

/**
 * The workflow engine's decisions, as pure functions of an instance's steps and what just
 * happened: which steps start (and after what delay), which episodes to cancel, and what the
 * instance becomes. The engine reads, decides here, and writes the result conditionally on the
 * version it read; nothing here touches the database or the clock.
 */
export class WorkflowTransitions {
  private readonly steps: Record<string, StepState>;
  private status: WorkflowInstanceStatus = 'running';
  private error: string | null = null;
  private readonly start: StepStart[] = [];
  private readonly cancel: string[] = [];

  private constructor(
    private readonly workflow: RegisteredWorkflow,
    steps: Record<string, StepState>,
    private readonly newId: () => string,
  ) {
    this.steps = structuredClone(steps);
  }

  /** A new instance: every step waiting, those without dependencies started. */
  static begin(workflow: RegisteredWorkflow, newId: () => string): Transition {
    const steps: Record<string, StepState> = {};
    for (const id of workflow.steps.keys())
      steps[id] = { status: 'waiting', attempts: 0, episodeId: null, result: null, error: null };
    const t = new WorkflowTransitions(workflow, steps, newId);
    t.startReady();
    return t.result();
  }

  /**
   * A step's episode ended. Null when the event is stale: the instance ended, or the step is not
   * waiting for that episode (a replayed event, or one another node already applied).
   */
  static episodeEnded(
    workflow: RegisteredWorkflow,
    instance: { status: WorkflowInstanceStatus; steps: Record<string, StepState> },
    stepId: string,
    outcome: EpisodeOutcome,
    newId: () => string,
  ): Transition | null {
    if (instance.status !== 'running' && instance.status !== 'blocked') return null;
    const state = instance.steps[stepId];
    if (!state || state.status !== 'running' || state.episodeId !== outcome.episodeId) return null;
    const t = new WorkflowTransitions(workflow, instance.steps, newId);
    t.status = instance.status;
    t.apply(stepId, outcome);
    return t.result();
  }

  /**
   * The input of a step `transition` starts could not be built: the step fails without an episode
   * (no retry: the same input would fail again) and its policy's final action applies.
   */
  static inputFailed(
    workflow: RegisteredWorkflow,
    transition: Transition,
    stepId: string,
    reason: string,
    newId: () => string,
  ): Transition {
    const t = new WorkflowTransitions(workflow, transition.steps, newId);
    t.status = transition.status;
    t.error = transition.error;
    t.start.push(...transition.start.filter((s) => s.stepId !== stepId));
    t.cancel.push(...transition.cancel);
    const state = t.steps[stepId] as StepState;
    state.episodeId = null;
    t.fail(stepId, `input: ${reason}`, 'final');
    return t.result();
  }

  /**
   * Cancels a live instance: running steps' episodes canceled, waiting steps never started. Null
   * when it had ended.
   */
  static canceled(
    instance: { status: WorkflowInstanceStatus; steps: Record<string, StepState> },
    reason: string,
  ): Transition | null {
    if (instance.status !== 'running' && instance.status !== 'blocked') return null;
    const steps = structuredClone(instance.steps);
    const cancel: string[] = [];
    for (const state of Object.values(steps)) {
      if (state.status === 'running' && state.episodeId) cancel.push(state.episodeId);
      if (state.status === 'running' || state.status === 'waiting') state.status = 'canceled';
    }
    return { status: 'canceled', steps, error: reason, start: [], cancel };
  }

  private apply(stepId: string, outcome: EpisodeOutcome): void {
    const state = this.steps[stepId] as StepState;
    const result: StepResult = {
      status: outcome.status,
      episodeId: outcome.episodeId,
      summary: outcome.summary,
      classification: outcome.classification ?? null,
      error: outcome.errorClass
        ? [outcome.errorClass, firstLine(outcome.errorDetail)].filter(Boolean).join(': ')
        : null,
    };
    const large =
      result.classification !== null &&
      JSON.stringify(result.classification).length > INLINE_CLASSIFICATION_BYTES;
    state.result = large ? { ...result, classification: null } : result;
    if (large) state.classificationRef = true;
    else delete state.classificationRef;

    if (outcome.status === 'done' || outcome.status === 'partially_failed') {
      state.status = 'done';
      state.error = null;
      this.startReady();
      return;
    }
    const reason = result.error ?? (outcome.status === 'canceled' ? 'canceled' : 'failed');
    this.fail(
      stepId,
      outcome.status === 'canceled' ? `episode canceled: ${reason}` : reason,
      outcome.status === 'canceled' ? 'final' : 'retry',
    );
  }

  /** A failed attempt: retried while the policy allows (`retry`), else its final action. */
  private fail(stepId: string, reason: string, mode: 'retry' | 'final'): void {
    const state = this.steps[stepId] as StepState;
    const policy = this.step(stepId).policy;
    if (mode === 'retry' && state.attempts < policy.attempts) {
      const delayMs = policy.backoffMs * 2 ** (state.attempts - 1);
      state.error = reason;
      this.launch(stepId, delayMs);
      return;
    }
    state.status = 'failed';
    state.error = reason;
    if (policy.then === 'continue') {
      this.startReady();
      return;
    }
    this.status = 'failed';
    this.error = `step ${stepId} failed: ${reason}`;
    // Episodes this transition was about to create do not exist yet: dropping the start is enough.
    const unborn = new Set(this.start.map((s) => s.episodeId));
    for (const [id, other] of Object.entries(this.steps)) {
      if (id === stepId) continue;
      if (other.status === 'running' && other.episodeId && !unborn.has(other.episodeId))
        this.cancel.push(other.episodeId);
      if (other.status === 'running' || other.status === 'waiting') other.status = 'canceled';
    }
    this.start.length = 0;
  }

  /**
   * Starts every waiting step whose dependencies have all finished; ends the instance when nothing
   * is left.
   */
  private startReady(): void {
    for (const [id, state] of Object.entries(this.steps)) {
      if (state.status !== 'waiting') continue;
      if (
        this.step(id).after.every((dependency) =>
          FINISHED.has(this.steps[dependency]?.status ?? ''),
        )
      )
        this.launch(id, 0);
    }
    if (Object.values(this.steps).every((s) => FINISHED.has(s.status))) this.status = 'done';
  }

  private launch(stepId: string, delayMs: number): void {
    const state = this.steps[stepId] as StepState;
    state.status = 'running';
    state.attempts += 1;
    state.episodeId = this.newId();
    this.start.push({ stepId, episodeId: state.episodeId, attempt: state.attempts, delayMs });
  }

  private step(stepId: string) {
    const step = this.workflow.steps.get(stepId);
    if (!step) throw new Error(`workflow ${this.workflow.id} has no step ${stepId}`);
    return step;
  }

  private result(): Transition {
    return {
      status: this.status,
      steps: this.steps,
      error: this.error,
      start: [...this.start],
      cancel: [...this.cancel],
    };
  }
}
