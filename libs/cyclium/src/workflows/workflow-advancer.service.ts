import { randomUUID } from 'node:crypto';
import { Injectable, Logger } from '@nestjs/common';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { DeferredRunner, REQUEST_WAKE_EVENT } from '../dispatch/deferred-runner.service.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { CANCEL_EVENT, lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { scopeKey } from '../scope/scope-key.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { RegisteredWorkflow } from './registered-workflow.js';
import {
  WorkflowInstanceStore,
  type NewInstance,
  type WorkflowInstanceRow,
} from './workflow-instance-store.js';
import { StepInputs, type InstanceContext } from './step-inputs.service.js';
import {
  TERMINAL_EPISODE_STATUSES,
  WorkflowTransitions,
  type EpisodeOutcome,
  type Transition,
} from './workflow-transitions.js';

/**
 * What a write came to: done, or lost to another node (`conflict`: it advanced first; `busy`: it is
 * advancing now; `duplicate`: a live instance already has the key).
 */
export type WriteOutcome = 'ok' | 'conflict' | 'busy' | 'duplicate';

class Lost extends Error {
  override readonly name = 'Lost';
  constructor(readonly outcome: Exclude<WriteOutcome, 'ok'>) {
    super(outcome);
  }
}

const FINAL = new Set(['done', 'failed', 'canceled']);

/** The claim one node takes to advance an instance (inside the advance's transaction). */
export function instanceClaimKey(id: string): string {
  return `workflow_instance:${id}`;
}

/**
 * Applies a transition (see WorkflowTransitions) in one transaction: for an existing instance the
 * per-instance claim, then the step states written only at the version that was read (rule 4's
 * fence for instances: a replayed or concurrent event that lost writes nothing), the next steps'
 * episodes created deferred with their trigger requests (a full node that hosts the actor takes
 * each; a retry's request waits out its backoff), and the episodes of steps no longer wanted
 * canceled — with their events. Step inputs are built (StepInputs) before the transaction opens.
 */
@Injectable()
export class WorkflowAdvancer {
  private readonly logger = new Logger('CycliumWorkflows');
  private readonly wakes = new Set<NodeJS.Timeout>();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly instances: WorkflowInstanceStore,
    private readonly episodes: EpisodeStore,
    private readonly deferred: DeferredRunner,
    private readonly inputs: StepInputs,
    private readonly claims: WorkClaims,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
  ) {}

  /**
   * Writes a new instance and starts its first steps; `duplicate` when the unique keys refused it.
   */
  async create(
    workflow: RegisteredWorkflow,
    spec: Omit<NewInstance, 'status' | 'steps' | 'error'>,
    hostClient?: SqlExecutor,
  ): Promise<WriteOutcome> {
    const context: InstanceContext = { ...spec, input: JSON.parse(spec.inputJson) as unknown };
    const prepared = await this.inputs.prepare(
      workflow,
      context,
      WorkflowTransitions.begin(workflow, randomUUID),
    );
    const { transition } = prepared;
    const own = async (client: SqlExecutor) => {
      if (
        !(await this.instances.insert(client, {
          ...spec,
          status: transition.status,
          steps: transition.steps,
          error: transition.error,
        }))
      )
        throw new Lost('duplicate');
      return null;
    };
    if (hostClient) return this.writeInHost(hostClient, workflow, context, prepared, own);
    const outcome = await this.write(workflow, context, prepared, own);
    if (outcome === 'ok') {
      this.telemetry.emit('workflow.started', { instanceId: spec.id, workflowId: workflow.id });
      this.finished(workflow, spec.id, prepared.transition);
    }
    return outcome;
  }

  /**
   * Applies the end of `episode` to its step of `instance`: null when there is nothing to apply
   * (the event is stale or replayed), else how the write went.
   */
  async episodeEnded(
    workflow: RegisteredWorkflow,
    instance: WorkflowInstanceRow,
    episode: EpisodeRow,
  ): Promise<WriteOutcome | null> {
    if (!TERMINAL_EPISODE_STATUSES.has(episode.status) || !episode.workflowStepId) return null;
    const outcome: EpisodeOutcome = {
      episodeId: episode.id,
      status: episode.status as EpisodeOutcome['status'],
      summary: episode.summary,
      classification: episode.classification ?? null,
      errorClass: episode.errorClass,
      errorDetail: episode.errorDetail,
    };
    const transition = WorkflowTransitions.episodeEnded(
      workflow,
      { status: instance.status, steps: instance.stepStates },
      episode.workflowStepId,
      outcome,
      randomUUID,
    );
    if (!transition) return null;
    return this.update(workflow, instance, transition);
  }

  /** Cancels a live instance and the episodes of its running steps; null when it had ended. */
  async cancel(
    workflow: RegisteredWorkflow | undefined,
    instance: WorkflowInstanceRow,
    reason: string,
  ): Promise<WriteOutcome | null> {
    const transition = WorkflowTransitions.canceled(
      { status: instance.status, steps: instance.stepStates },
      reason,
    );
    if (!transition) return null;
    return this.update(workflow, instance, transition);
  }

  /**
   * An instance whose row does not verify (the `integrity` option): ended `failed`, none of its
   * step states acted on, with a warn log naming it. Its running step episodes end on their own.
   */
  private async tampered(instance: WorkflowInstanceRow): Promise<WriteOutcome> {
    const reason =
      `tampered: cyclium_workflow_instances row ${instance.id} is not signed by ` +
      `this deployment's integrity key (edited or forged); not advanced`;
    if (!(await this.instances.failTampered(instance, reason))) return 'conflict';
    this.logger.warn(`workflow instance ${instance.id} (${instance.workflowId}) failed: ${reason}`);
    this.telemetry.emit('workflow.finished', {
      instanceId: instance.id,
      workflowId: instance.workflowId,
      status: 'failed',
      error: reason,
    });
    return 'ok';
  }

  /**
   * Clears the wake-ups scheduled for retries (the drain calls it; the requests still wait in the
   * table).
   */
  stop(): void {
    for (const timer of this.wakes) clearTimeout(timer);
    this.wakes.clear();
  }

  private async update(
    workflow: RegisteredWorkflow | undefined,
    instance: WorkflowInstanceRow,
    transition: Transition,
  ): Promise<WriteOutcome> {
    if (!this.instances.verify(instance)) return this.tampered(instance);
    const context: InstanceContext = {
      id: instance.id,
      subject: instance.subjectValue,
      input: instance.input,
      sourceStack: instance.sourceStack,
      sourceEnv: instance.sourceEnv,
      traceContext: instance.traceContext,
    };
    const prepared = workflow
      ? await this.inputs.prepare(workflow, context, transition)
      : { transition, inputs: new Map<string, unknown>() };
    const me = this.identity.name();
    const outcome = await this.write(workflow, context, prepared, async (client) => {
      const grant = await this.claims.acquireWithin(client, instanceClaimKey(instance.id), me, {
        workType: 'workflow',
      });
      if (grant.status === 'busy') throw new Lost('busy');
      if (!(await this.instances.advance(client, instance, prepared.transition)))
        throw new Lost('conflict');
      return async () => {
        if (grant.status === 'acquired')
          await this.claims.completeWithin(
            client,
            instanceClaimKey(instance.id),
            me,
            grant.claim.fence,
          );
      };
    });
    if (outcome === 'ok' && workflow) this.finished(workflow, instance.id, prepared.transition);
    return outcome;
  }

  /**
   * The transaction: `own` writes the instance (throwing Lost when it cannot, and returning the
   * statement that ends it, if any), then the new step episodes, the cancellations and their
   * events; wake-ups after commit.
   */
  /**
   * `write` through the host's open transaction: the same statements, with no BEGIN or COMMIT of
   * its own, and a NOTIFY that PostgreSQL delivers at the host's commit in place of the wake-ups
   * after it. `duplicate` writes nothing (the instance is the first write), so the host's
   * transaction can go on.
   */
  private async writeInHost(
    client: SqlExecutor,
    workflow: RegisteredWorkflow,
    instance: InstanceContext,
    prepared: { transition: Transition; inputs: Map<string, unknown> },
    own: (client: SqlExecutor) => Promise<null>,
  ): Promise<WriteOutcome> {
    try {
      await this.steps(workflow, instance, prepared, own, client);
    } catch (error) {
      if (error instanceof Lost) return error.outcome;
      throw error;
    }
    await this.events.wakeAtCommitOn(client);
    return 'ok';
  }

  private async write(
    workflow: RegisteredWorkflow | undefined,
    instance: InstanceContext,
    prepared: { transition: Transition; inputs: Map<string, unknown> },
    own: (client: SqlExecutor) => Promise<(() => Promise<void>) | null>,
  ): Promise<WriteOutcome> {
    const { transition } = prepared;
    let after: { announces: Announce[]; stillRunning: string[] };
    try {
      after = await this.database.transaction((client) =>
        this.steps(workflow, instance, prepared, own, client),
      );
    } catch (error) {
      if (error instanceof Lost) return error.outcome;
      throw error;
    }
    for (const announce of after.announces) announce();
    for (const episodeId of after.stillRunning) this.events.announce(CANCEL_EVENT, { episodeId });
    for (const start of transition.start) if (start.delayMs > 0) this.wakeAfter(start.delayMs);
    return 'ok';
  }

  /**
   * Inside the caller's transaction on `client`: `own`'s write, then the episodes of the steps the
   * transition starts and the cancels of those it stops; what to announce once it commits.
   */
  private async steps(
    workflow: RegisteredWorkflow | undefined,
    instance: InstanceContext,
    prepared: { transition: Transition; inputs: Map<string, unknown> },
    own: (client: SqlExecutor) => Promise<(() => Promise<void>) | null>,
    client: SqlExecutor,
  ): Promise<{ announces: Announce[]; stillRunning: string[] }> {
    const { transition, inputs } = prepared;
    const me = this.identity.name();
    const last = await own(client);
    const announces: Announce[] = [];
    for (const start of transition.start) {
      const step = workflow?.steps.get(start.stepId);
      if (!step)
        throw new Error(`workflow instance ${instance.id}: no step ${start.stepId} to start`);
      const dedupeKey = scopeKey(
        `workflow:${instance.id}:${start.stepId}:${start.attempt}`,
        instance.sourceEnv,
      );
      const { inserted, announce } = await this.deferred.deferWithin(
        client,
        start.episodeId,
        {
          actorId: step.actorId,
          expectationId: step.expectationId,
          trigger: {
            type: 'workflow',
            payload: inputs.get(start.episodeId),
            ...(instance.traceContext ? { traceContext: instance.traceContext } : {}),
          },
          dedupeKey,
          status: 'running',
          ownerNode: null,
          maxAttempts: step.maxAttempts,
          sourceStack: instance.sourceStack,
          sourceEnv: instance.sourceEnv,
          workflowInstanceId: instance.id,
          workflowStepId: start.stepId,
        },
        start.delayMs,
      );
      // Only a bug could get here (the version guard lets one advance through): roll it all
      // back.
      if (!inserted)
        throw new Error(
          `workflow instance ${instance.id}: the episode key ${dedupeKey} is already taken`,
        );
      announces.push(announce);
    }
    const canceled = await this.episodes.cancelWaiting(transition.cancel, client);
    const stillRunning = await this.episodes.requestCancel(transition.cancel, client);
    announces.push(
      await this.events.within(
        client,
        canceled.map((e) => lifecycleEvent('episode.canceled', e, 'canceled', me)),
      ),
    );
    await last?.();
    return { announces, stillRunning };
  }

  /**
   * Full nodes poll anyway; this wakes them when a retry's backoff is over instead of at their next
   * poll.
   */
  private wakeAfter(delayMs: number): void {
    const timer = setTimeout(() => {
      this.wakes.delete(timer);
      this.events.announce(REQUEST_WAKE_EVENT, { node: this.identity.name() });
    }, delayMs + 20);
    timer.unref();
    this.wakes.add(timer);
  }

  private finished(workflow: RegisteredWorkflow, instanceId: string, transition: Transition): void {
    if (!FINAL.has(transition.status)) return;
    const log = transition.status === 'done' ? 'log' : 'warn';
    this.logger[log](
      `workflow instance ${instanceId} (${workflow.id}) ` +
        `${transition.status}${transition.error ? `: ${transition.error}` : ''}`,
    );
    this.telemetry.emit('workflow.finished', {
      instanceId,
      workflowId: workflow.id,
      status: transition.status,
      error: transition.error,
    });
  }
}
