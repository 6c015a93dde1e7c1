import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredStep, RegisteredWorkflow, StepPolicy } from './registered-workflow.js';
import { WorkflowDefinitionError } from './workflow-definition.error.js';
import type {
  StepFailurePolicy,
  WorkflowOptions,
  WorkflowStepOptions,
} from './workflow.decorator.js';

const ACTIONS = ['fail_workflow', 'continue'];

/**
 * What a step's validation asks of the actors: whether the app declares an actor and an
 * expectation.
 */
export type DeclaredActors = Pick<ActorRegistry, 'declares' | 'declared'>;

/**
 * `@Workflow` options with their defaults, or WorkflowDefinitionError naming the class and the
 * field.
 */
export function validateWorkflow(
  className: string,
  options: WorkflowOptions | undefined,
): RegisteredWorkflow {
  const fail = (message: string): never => {
    throw new WorkflowDefinitionError(`@Workflow on ${className}: ${message}`);
  };
  if (!options || typeof options.id !== 'string' || options.id.trim() === '')
    fail('id must be a non-empty string');
  const declared = options as WorkflowOptions;
  const trigger = declared.trigger ?? 'manual';
  const extra =
    typeof trigger === 'object' && trigger !== null
      ? Object.keys(trigger).filter((k) => k !== 'event' && k !== 'filter')
      : [];
  if (
    trigger !== 'manual' &&
    !(
      typeof trigger === 'object' &&
      trigger !== null &&
      typeof trigger.event === 'string' &&
      trigger.event !== '' &&
      extra.length === 0
    )
  ) {
    fail(`trigger must be 'manual' or { event, filter? } (got ${JSON.stringify(trigger)})`);
  }
  if (
    declared.subjectKey !== undefined &&
    (typeof declared.subjectKey !== 'string' || declared.subjectKey === '')
  ) {
    fail('subjectKey must be a non-empty input path');
  }
  return { id: declared.id, className, options: { ...declared, trigger }, steps: new Map() };
}

/** `@WorkflowStep` options, checked against the actors the app declares. */
export function validateStep(
  actors: DeclaredActors,
  className: string,
  methodName: string,
  options: WorkflowStepOptions,
): RegisteredStep {
  const where = `@WorkflowStep on ${className}.${methodName}`;
  const fail = (message: string): never => {
    throw new WorkflowDefinitionError(`${where}: ${message}`);
  };
  const id = options.id ?? methodName;
  if (typeof id !== 'string' || id.trim() === '') fail('id must be a non-empty string');
  if (typeof options.actor !== 'string' || typeof options.expectation !== 'string')
    fail('actor and expectation must be strings');
  if (!actors.declares(options.actor))
    fail(`unknown actor "${options.actor}" (no @Actor with that id in this app)`);
  const expectation = actors.declared(options.actor, options.expectation);
  if (!expectation) fail(`actor "${options.actor}" has no expectation "${options.expectation}"`);
  const after = options.after ?? [];
  if (!Array.isArray(after) || !after.every((d) => typeof d === 'string'))
    fail('after must be an array of step ids');
  return {
    id,
    methodName,
    actorId: options.actor,
    expectationId: options.expectation,
    after,
    policy: policyOf(where, options.onFailure),
    maxAttempts: expectation?.options.maxAttempts ?? 3,
    buildInput: async () => undefined,
  };
}

/** A step's `onFailure`, normalised to attempts, backoff and what follows the last failure. */
function policyOf(where: string, policy: StepFailurePolicy | undefined): StepPolicy {
  const fail = (message: string): never => {
    throw new WorkflowDefinitionError(`${where}: ${message}`);
  };
  if (policy === undefined || (typeof policy === 'string' && ACTIONS.includes(policy))) {
    return { attempts: 1, backoffMs: 0, then: (policy ?? 'fail_workflow') as StepPolicy['then'] };
  }
  const retry = typeof policy === 'object' && policy !== null ? policy.retry : undefined;
  if (!retry || typeof retry !== 'object')
    fail(
      `onFailure must be 'fail_workflow', 'continue' or { retry: { attempts, backoffMs?, then? } ` +
        `} (got ${JSON.stringify(policy)})`,
    );
  const {
    attempts,
    backoffMs = 1_000,
    then = 'fail_workflow',
  } = retry as { attempts: number; backoffMs?: number; then?: string };
  if (!Number.isInteger(attempts) || attempts < 1)
    fail(
      `onFailure.retry.attempts must be a whole number >= 1, the first try included (got ` +
        `${attempts})`,
    );
  if (!Number.isInteger(backoffMs) || backoffMs < 0)
    fail(
      `onFailure.retry.backoffMs must be a whole number of milliseconds >= 0 (got ${backoffMs})`,
    );
  if (!ACTIONS.includes(then))
    fail(
      `onFailure.retry.then must be 'fail_workflow' or 'continue' (got ${JSON.stringify(then)})`,
    );
  return { attempts, backoffMs, then: then as StepPolicy['then'] };
}

/** Every dependency exists, and following them never comes back to where it started. */
export function checkGraph(workflow: RegisteredWorkflow): void {
  const where = `@Workflow ${workflow.id} (${workflow.className})`;
  if (workflow.steps.size === 0)
    throw new WorkflowDefinitionError(`${where}: has no @WorkflowStep methods`);
  for (const step of workflow.steps.values()) {
    for (const dependency of step.after) {
      if (!workflow.steps.has(dependency))
        throw new WorkflowDefinitionError(
          `${where}: step "${step.id}" runs after "${dependency}", which is not a step of this ` +
            `workflow`,
        );
    }
  }
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (id: string, path: string[]): void => {
    if (state.get(id) === 'done') return;
    if (state.get(id) === 'visiting') {
      const loop = [...path.slice(path.indexOf(id)), id];
      throw new WorkflowDefinitionError(
        `${where}: steps depend on each other in a cycle: ${loop.join(' → ')}`,
      );
    }
    state.set(id, 'visiting');
    for (const dependency of workflow.steps.get(id)?.after ?? []) visit(dependency, [...path, id]);
    state.set(id, 'done');
  };
  for (const id of workflow.steps.keys()) visit(id, []);
}
