import { DiscoveryService, Reflector } from '@nestjs/core';
import type { FilterValue } from '../actors/expectation.decorator.js';
import type { StepResult } from '../entities/workflow-step-state.js';

/** What starts a workflow instance: `WorkflowEngine.start` only, or a bus event. */
export type WorkflowTrigger =
  /** Only `WorkflowEngine.start(...)`. */
  | 'manual'
  /**
   * Each bus event of this type whose payload matches starts one instance across the cluster; the
   * payload is its input.
   */
  | { event: string; filter?: Record<string, FilterValue>; every?: never; cron?: never };

/** Options of `@Workflow`: its id, trigger and subject. */
export interface WorkflowOptions {
  id: string;
  /** Default `'manual'`. */
  trigger?: WorkflowTrigger;
  /** Input path naming the subject: one live instance per subject (per stack and env). */
  subjectKey?: string;
}

/**
 * What ends a failed step: fail the instance (and cancel the rest), or let the steps after it run.
 */
export type StepFailureAction = 'fail_workflow' | 'continue';

/** What a workflow does when a step's episode fails: an action, or retry first. */
export type StepFailurePolicy =
  | StepFailureAction
  /**
   * Start the step again, up to `attempts` tries in all (the first included), waiting `backoffMs`
   * (default 1 000) before the second and twice as long before each one after; then `then`
   * (default `fail_workflow`). A canceled episode is not retried.
   */
  | { retry: { attempts: number; backoffMs?: number; then?: StepFailureAction } };

/** Options of `@WorkflowStep`: which actor and expectation run it, and on failure. */
export interface WorkflowStepOptions {
  /** Default: the method name. */
  id?: string;
  /** The actor and expectation that run the step (declared in this app, on any stack). */
  actor: string;
  expectation: string;
  /** Steps that must have finished first (done, or failed under `continue`). */
  after?: string[];
  /** Default `'fail_workflow'`. */
  onFailure?: StepFailurePolicy;
}

/** What a step method receives to build its episode's input (its return value, JSON). */
export interface WorkflowStepContext<I = unknown> {
  instanceId: string;
  workflowId: string;
  subject: string | null;
  input: I;
  /** The finished steps this one may read, by step id. */
  results: Record<string, StepResult>;
  /** 1 for the first try, 2 for the first retry, … */
  attempt: number;
}

/** Marks a provider as a workflow; its `@WorkflowStep` methods are its steps. */
export const Workflow = DiscoveryService.createDecorator<WorkflowOptions>();

/**
 * Marks a workflow method as a step. The method builds the step's episode input from the
 * workflow's input and earlier results; it runs on whichever node advances the instance, so it
 * should be quick and read nothing but its context.
 */
export const WorkflowStep = Reflector.createDecorator<WorkflowStepOptions>();
