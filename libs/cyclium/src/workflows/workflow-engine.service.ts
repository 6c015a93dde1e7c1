import { createHash, randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { matchesFilter, readPath } from '../actors/trigger-filter.js';
import type { BusEvent } from '../bus/bus.interface.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { OutageLog, errorMessage, isDatabaseUnavailable } from '../sql/database-errors.js';
import { toJsonb } from '../sql/jsonb.js';
import { Mode } from '../dispatch/mode.service.js';
import { TERMINAL_EVENTS, type LifecyclePayload } from '../episodes/episode-events.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { RegisteredWorkflow } from './registered-workflow.js';
import { WorkflowAdvancer, type WriteOutcome } from './workflow-advancer.service.js';
import { InvalidWorkflowInputError, WorkflowDefinitionError } from './workflow-definition.error.js';
import { WorkflowInstanceStore, type WorkflowInstanceRow } from './workflow-instance-store.js';
import { WorkflowRegistry } from './workflow-registry.service.js';
import { isUuid } from '../sql/uuid.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { HostTransaction } from '../transactions/host-transaction.js';
import { HostTransactions } from '../database/host-transactions.service.js';
import { activeTraceContext, type TraceContext } from '../primitives/trace-context.js';

/** Options of `WorkflowEngine.start`. */
export interface StartWorkflowOptions {
  /**
   * One live instance per subject: a start while one runs returns that one. Default: the input at
   * the workflow's `subjectKey`, else none.
   */
  subject?: string | null;
  /**
   * Start inside this open transaction of the host's: the instance and its first steps' episodes
   * commit with the host's writes (nothing runs before), or not at all after a rollback.
   */
  manager?: HostTransaction;
}

/** What a workflow cancel did: canceled it, found it finished, or found none. */
export type WorkflowCancelResult = 'canceled' | 'finished' | 'not_found';

/**
 * How often one node tries an event or a start that keeps losing races before leaving it to its
 * peers (and reconciliation).
 */
const ATTEMPTS = 8;
const MAX_SUBJECT_BYTES = 1_000;
/** create()'s answer when the id it was given is another stack's instance. */
const OTHER_STACK = Symbol('other stack');

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/**
 * Runs workflows: `start` creates an instance and its first steps' episodes; after that an
 * instance moves only when a terminal bus event of one of its step episodes arrives. Every node
 * with the engine on listens; each event is applied by one of them (the per-instance claim, and
 * the version the write is conditional on), the others find it applied and drop it. The next
 * steps start as deferred episodes, so a full node that hosts each step's actor runs it,
 * wherever the instance advanced. Events a node missed (none was listening) are replayed by
 * `Recovery.reconcileWorkflows`, which the module runs after every sweep.
 */
@Injectable()
export class WorkflowEngine implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumWorkflows');
  private readonly outage = new OutageLog(this.logger, 'advancing workflows');
  private readonly unsubscribes: Array<() => void> = [];
  /** One advance at a time per instance on this node, so the node never races itself. */
  private readonly chains = new Map<string, Promise<void>>();
  private stopped = false;

  constructor(
    private readonly registry: WorkflowRegistry,
    private readonly instances: WorkflowInstanceStore,
    private readonly episodes: EpisodeStore,
    private readonly advancer: WorkflowAdvancer,
    private readonly events: EventOutbox,
    private readonly mode: Mode,
    private readonly transactions: HostTransactions,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * Whether this node advances instances (option `workflowEngine`, and at least one workflow
   * declared).
   */
  get advancing(): boolean {
    return this.options.workflowEngine && this.registry.all().length > 0 && !this.stopped;
  }

  /** Nest calls it: subscribes to episodes' terminal events (and workflow triggers). */
  onApplicationBootstrap(): void {
    if (!this.advancing) return;
    for (const type of TERMINAL_EVENTS) {
      this.unsubscribes.push(
        // Its steps' ends are always written: the engine is no reason to write the others'.
        this.events.subscribe<LifecyclePayload>(type, (event) => this.heard(event), {
          undeclared: true,
        }),
      );
    }
    for (const workflow of this.registry.all()) {
      const trigger = workflow.options.trigger;
      if (trigger === undefined || trigger === 'manual') continue;
      this.unsubscribes.push(
        this.events.subscribe(trigger.event, (event) => {
          if (matchesFilter(trigger.filter, event.payload))
            this.serially(`start:${workflow.id}`, () => this.startFromEvent(workflow, event));
        }),
      );
    }
  }

  /** Stops listening (the drain calls it first) and waits for the advances under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const unsubscribe of this.unsubscribes.splice(0)) unsubscribe();
    this.advancer.stop();
    await Promise.all([...this.chains.values()]);
  }

  /**
   * Starts `workflowId` with `input` and returns the instance id. With a subject (explicit, or the
   * input at `subjectKey`), a start while an instance for that subject is live returns that
   * instance instead — across nodes, however close together the starts; one after it ended
   * creates a new one. Stamped with this node's stack and env.
   */
  async start(
    workflowId: string,
    input: unknown = {},
    options: StartWorkflowOptions = {},
  ): Promise<string> {
    const workflow = this.registry.get(workflowId);
    if (!workflow) throw new WorkflowDefinitionError(`no workflow ${workflowId} on this node`);
    if (this.mode.current === 'disabled')
      throw new WorkflowDefinitionError(
        `cannot start ${workflowId}: this node is disabled (mode disabled)`,
      );
    const subject = this.subjectOf(workflow, input, options.subject);
    const host =
      options.manager === undefined
        ? undefined
        : await this.transactions.executor(
            options.manager,
            `WorkflowEngine.start(${workflowId}, …, { manager })`,
          );
    const id = await this.create(
      workflow,
      randomUUID(),
      input,
      subject,
      host,
      activeTraceContext(),
    );
    if (!id || id === OTHER_STACK)
      throw new Error(
        `could not start ${workflowId}: it kept losing to concurrent starts for subject ${subject}`,
      );
    return id;
  }

  /**
   * Cancels a live instance from any node: its waiting steps never start, its running step episodes
   * are canceled.
   */
  async cancel(instanceId: string, reason = 'canceled by request'): Promise<WorkflowCancelResult> {
    if (!isUuid(instanceId)) return 'not_found';
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const instance = await this.instances.get(instanceId);
      if (!instance) return 'not_found';
      const outcome = await this.advancer.cancel(
        this.registry.get(instance.workflowId),
        instance,
        reason,
      );
      if (outcome === null) return 'finished';
      if (outcome === 'ok') return 'canceled';
      await this.backOff(outcome, attempt);
    }
    throw new Error(
      `could not cancel workflow instance ${instanceId}: it kept advancing under this call`,
    );
  }

  /** Null for an id that names no instance (not a UUID included). */
  async get(instanceId: string): Promise<WorkflowInstanceRow | null> {
    return isUuid(instanceId) ? this.instances.get(instanceId) : null;
  }

  /** The newest instances, optionally of one status (at most 500). */
  list(
    options: { status?: WorkflowInstanceRow['status']; limit?: number } = {},
  ): Promise<WorkflowInstanceRow[]> {
    return this.instances.recent(options.status, Math.min(Math.max(options.limit ?? 50, 1), 500));
  }

  /** Applies a step episode's terminal event (heard live, or replayed by reconciliation). */
  private heard(event: BusEvent<LifecyclePayload>): void {
    const payload = event.payload;
    if (
      !payload ||
      typeof payload.workflowInstanceId !== 'string' ||
      typeof payload.episodeId !== 'string'
    )
      return;
    if (this.mode.current === 'disabled') return;
    const { workflowInstanceId, episodeId } = payload;
    this.serially(workflowInstanceId, () => this.advance(workflowInstanceId, episodeId));
  }

  private async advance(instanceId: string, episodeId: string): Promise<void> {
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const [instance, [episode]] = await Promise.all([
        this.instances.get(instanceId),
        this.episodes.getMany([episodeId]),
      ]);
      if (
        !instance ||
        !episode ||
        episode.workflowInstanceId !== instanceId ||
        !this.inScope(instance)
      )
        return;
      const workflow = this.registry.get(instance.workflowId);
      if (!workflow) return; // another deployment's workflow: its nodes advance it
      const outcome = await this.advancer.episodeEnded(workflow, instance, episode);
      if (outcome === null || outcome === 'ok') return;
      await this.backOff(outcome, attempt);
    }
    this.logger.debug(
      `workflow instance ${instanceId}: left episode ${episodeId}'s event to the node advancing it`,
    );
  }

  /**
   * An event-triggered start: the instance id derives from the event, so every node that hears it
   * writes the same row once. The id names the env but not the stack, as nodes of the previous
   * release derive it; when another stack's instance already holds it (one event id published to
   * both stacks), this stack's instance takes the id that names the stack too.
   */
  private async startFromEvent(workflow: RegisteredWorkflow, event: BusEvent): Promise<void> {
    if (this.mode.current === 'disabled') return;
    const name = `workflow:${workflow.id}:${event.eventId}:${this.options.env ?? ''}`;
    try {
      const subject = this.subjectOf(workflow, event.payload, undefined);
      const trace = event.traceContext;
      const input = event.payload ?? {};
      const started = await this.create(workflow, uuidFrom(name), input, subject, undefined, trace);
      if (started === OTHER_STACK)
        await this.create(
          workflow,
          uuidFrom(`${name}:${this.options.stackSlug}`),
          input,
          subject,
          undefined,
          trace,
        );
    } catch (error) {
      this.logger.warn(
        `workflow ${workflow.id} not started for event ${event.eventId} (${event.type}): ` +
          `${errorMessage(error)}`,
      );
    }
  }

  /**
   * Writes the instance; on a unique-key loss returns the live instance that won (or the same id,
   * seen before), or OTHER_STACK when the id is held by another stack's instance.
   */
  private async create(
    workflow: RegisteredWorkflow,
    id: string,
    input: unknown,
    subject: string | null,
    hostClient: SqlExecutor | undefined,
    traceContext: TraceContext | undefined,
  ): Promise<string | typeof OTHER_STACK | null> {
    const json = toJsonb(input);
    if ('problem' in json)
      throw new InvalidWorkflowInputError(`the input of ${workflow.id} ${json.problem}`);
    const stack = this.options.stackSlug;
    const env = this.options.env;
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const outcome = await this.advancer.create(
        workflow,
        {
          id,
          workflowId: workflow.id,
          inputJson: json.json,
          subject,
          sourceStack: stack,
          sourceEnv: env,
          ...(traceContext === undefined ? {} : { traceContext }),
        },
        hostClient,
      );
      if (outcome === 'ok') return id;
      const held = await this.instances.get(id);
      if (held) return held.sourceStack === stack ? id : OTHER_STACK;
      const live =
        subject === null ? null : await this.instances.live(workflow.id, subject, stack, env);
      if (live) return live.id;
      // The live instance ended between our insert and our read: try again.
    }
    return null;
  }

  private subjectOf(
    workflow: RegisteredWorkflow,
    input: unknown,
    explicit: string | null | undefined,
  ): string | null {
    const raw =
      explicit !== undefined
        ? explicit
        : workflow.options.subjectKey
          ? readPath(input, workflow.options.subjectKey)
          : undefined;
    if (raw === undefined || raw === null) return null;
    // The subject is a unique index entry, which PostgreSQL bounds in bytes, not characters.
    if (
      (typeof raw !== 'string' && typeof raw !== 'number') ||
      String(raw) === '' ||
      Buffer.byteLength(String(raw), 'utf8') > MAX_SUBJECT_BYTES
    ) {
      const shown = JSON.stringify(
        typeof raw === 'string' ? `${raw.slice(0, 40)}${raw.length > 40 ? '…' : ''}` : raw,
      );
      throw new InvalidWorkflowInputError(
        `the subject of ${workflow.id} must be a non-empty string or number of at most ` +
          `${MAX_SUBJECT_BYTES} bytes in UTF-8 (got ${shown})`,
      );
    }
    const subject = String(raw);
    if (subject.includes('\u0000'))
      throw new InvalidWorkflowInputError(
        `the subject of ${workflow.id} holds a NUL character, which PostgreSQL cannot store`,
      );
    return subject;
  }

  /**
   * Stack: this node's, or rows with none (a node without a stack takes every one); env strictly.
   */
  private inScope(instance: WorkflowInstanceRow): boolean {
    const stack = this.options.stackSlug;
    const stackOk =
      stack === null || instance.sourceStack === null || instance.sourceStack === stack;
    return stackOk && instance.sourceEnv === this.options.env;
  }

  /** After `busy` another node is writing this instance: give it time to commit, then re-read. */
  private backOff(outcome: Exclude<WriteOutcome, 'ok'>, attempt: number): Promise<void> {
    return outcome === 'busy' ? pause(25 * attempt + Math.random() * 50) : Promise.resolve();
  }

  private serially(key: string, work: () => Promise<void>): void {
    const previous = this.chains.get(key) ?? Promise.resolve();
    const next = previous
      .then(work)
      .then(
        () => this.outage.succeeded(),
        (error: unknown) => {
          // An event that could not be applied is not lost: its step still says running, and
          // reconciliation replays it.
          if (isDatabaseUnavailable(error)) this.outage.failed(error);
          else
            this.logger.warn(
              `workflow ${key}: ${errorMessage(error)}; reconciliation will replay the event`,
            );
        },
      )
      .finally(() => {
        if (this.chains.get(key) === next) this.chains.delete(key);
      });
    this.chains.set(key, next);
  }
}

/** A UUID (version 8, RFC 9562) from a name: the same name gives the same id on every node. */
function uuidFrom(name: string): string {
  const bytes = createHash('sha256').update(name).digest().subarray(0, 16);
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x80;
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  const parts = [[0, 8], [8, 12], [12, 16], [16, 20], [20]] as const;
  return parts.map(([from, to]) => hex.slice(from, to)).join('-');
}
