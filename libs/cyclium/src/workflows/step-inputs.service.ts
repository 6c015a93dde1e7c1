import { randomUUID } from 'node:crypto';
import { Injectable, Logger } from '@nestjs/common';
import { errorMessage } from '../sql/database-errors.js';
import { toJsonb } from '../sql/jsonb.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import type { RegisteredWorkflow } from './registered-workflow.js';
import type { StepResult } from '../entities/workflow-step-state.js';
import { WorkflowTransitions, type Transition } from './workflow-transitions.js';
import type { TraceContext } from '../primitives/trace-context.js';

/** Who the instance is, as step input builders see it. */
export interface InstanceContext {
  id: string;
  subject: string | null;
  input: unknown;
  sourceStack: string | null;
  sourceEnv: string | null;
  /** Its step episodes continue this trace (see NewInstance.traceContext). */
  traceContext?: TraceContext | null;
}

/**
 * Builds step episodes' inputs with the host's `@WorkflowStep` methods, on the node that advances.
 */
@Injectable()
export class StepInputs {
  private readonly logger = new Logger('CycliumWorkflows');

  constructor(private readonly episodes: EpisodeStore) {}

  /**
   * Builds the input of every step the transition starts. A builder that throws (or returns what
   * PostgreSQL cannot store) fails its step without an episode, which may start or cancel others:
   * repeat until every start has its input.
   */
  async prepare(
    workflow: RegisteredWorkflow,
    instance: InstanceContext,
    transition: Transition,
  ): Promise<{ transition: Transition; inputs: Map<string, unknown> }> {
    const inputs = new Map<string, unknown>();
    let current = transition;
    let results: Record<string, StepResult> | null = null;
    for (;;) {
      const next = current.start.find((s) => !inputs.has(s.episodeId));
      if (!next) return { transition: current, inputs };
      const step = workflow.steps.get(next.stepId);
      if (!step) throw new Error(`workflow ${workflow.id} has no step ${next.stepId}`);
      results ??= await this.resultsOf(current);
      try {
        const value =
          (await step.buildInput({
            instanceId: instance.id,
            workflowId: workflow.id,
            subject: instance.subject,
            input: instance.input,
            results,
            attempt: next.attempt,
          })) ?? {};
        const json = toJsonb(value);
        if ('problem' in json) throw new Error(`the input ${json.problem}`);
        inputs.set(next.episodeId, value);
      } catch (error) {
        const reason = errorMessage(error);
        this.logger.warn(
          `workflow instance ${instance.id} (${workflow.id}): step ${next.stepId} could not ` +
            `build its input: ${reason}`,
        );
        current = WorkflowTransitions.inputFailed(
          workflow,
          current,
          next.stepId,
          reason,
          randomUUID,
        );
        results = null;
      }
    }
  }

  /**
   * The finished steps' results, with classifications kept by reference read back from their
   * episodes.
   */
  private async resultsOf(transition: Transition): Promise<Record<string, StepResult>> {
    const results: Record<string, StepResult> = {};
    const byReference: Array<[string, string]> = [];
    for (const [id, state] of Object.entries(transition.steps)) {
      if (!state.result || state.status === 'running' || state.status === 'waiting') continue;
      results[id] = state.result;
      if (state.classificationRef && state.result.episodeId)
        byReference.push([id, state.result.episodeId]);
    }
    if (byReference.length > 0) {
      const rows = new Map(
        (await this.episodes.getMany(byReference.map(([, e]) => e))).map((e) => [e.id, e]),
      );
      for (const [id, episodeId] of byReference) {
        results[id] = {
          ...(results[id] as StepResult),
          classification: rows.get(episodeId)?.classification ?? null,
        };
      }
    }
    return results;
  }
}
