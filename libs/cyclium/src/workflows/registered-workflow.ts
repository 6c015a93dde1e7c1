import type {
  StepFailureAction,
  WorkflowOptions,
  WorkflowStepContext,
} from './workflow.decorator.js';

/** A step's failure policy with its defaults applied. */
export interface StepPolicy {
  /** Tries in all, the first included (1: no retry). */
  attempts: number;
  backoffMs: number;
  then: StepFailureAction;
}

export interface RegisteredStep {
  id: string;
  methodName: string;
  actorId: string;
  expectationId: string;
  after: readonly string[];
  policy: StepPolicy;
  /** The declared expectation's restart limit, stamped on each step episode. */
  maxAttempts: number;
  buildInput: (context: WorkflowStepContext) => Promise<unknown>;
}

export interface RegisteredWorkflow {
  id: string;
  className: string;
  options: WorkflowOptions;
  /** In declaration order. */
  steps: Map<string, RegisteredStep>;
}
