import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { FlowAdmissions } from '../episodes/flow-admissions.js';
import { FlowQuiet } from '../episodes/flow-quiet.js';
import { ThrottledInserts } from '../episodes/throttled-inserts.js';
import { FlowPump, episodeFlow } from './flow-pump.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { EpisodeRunner, type RunOptions } from '../episodes/episode-runner.service.js';
import { EpisodeQueue } from '../episodes/episode-queue.js';
import { QueuedBegins } from '../episodes/queued-begins.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import type { NewEpisode } from '../episodes/episode-inserts.js';
import { Mode } from './mode.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import type { DispatchOptions, SlotResult } from './dispatch-result.js';
import { QueuePump } from './queue-pump.js';
import { RestartHandover, type WaitingRestart } from './restart-handover.js';
import { RunTracker } from './run-tracker.js';
import { logStartFailure } from '../episodes/episode-log-lines.js';
import { WaitingTriggers } from './waiting-triggers.js';
import type { SlotRuns } from './slot-runs.interface.js';

interface Slots {
  running: number;
  /**
   * Recovered episodes waiting here (still `running`, phase `recovering`), oldest first; they go
   * before the queue.
   */
  restarts: WaitingRestart[];
}

/**
 * Where triggers become running episodes: each actor's concurrency limit on this node, filled by
 * fresh triggers, by the restarts recovery hands over with their claims (RestartHandover), by bus
 * events waiting in memory with their event unsettled (WaitingTriggers), and by the queue in the
 * table (QueuePump), where any other trigger that finds every slot busy waits. A slot frees when
 * its method returns, so the next begin shares a commit with the end being written. A draining
 * node starts nothing new, and the drain can wait for every start already under way (RunTracker).
 */
@Injectable()
export class ActorSlots implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumDispatch');
  private readonly slots = new Map<string, Slots>();
  private readonly tracker = new RunTracker();
  private readonly queuePump: QueuePump;
  private readonly flowPump: FlowPump;
  private readonly handover: RestartHandover;
  private readonly waitingTriggers: WaitingTriggers;
  private readonly freedListeners = new Set<(actorId: string) => void>();

  constructor(
    private readonly registry: ActorRegistry,
    private readonly runner: EpisodeRunner,
    store: EpisodeStore,
    queue: EpisodeQueue,
    queuedBegins: QueuedBegins,
    claims: WorkClaims,
    private readonly identity: NodeIdentity,
    events: EventOutbox,
    private readonly mode: Mode,
    admissions: FlowAdmissions,
    throttledInserts: ThrottledInserts,
    private readonly flowQuiet: FlowQuiet,
    @Inject(CYCLIUM_OPTIONS) options: ResolvedCycliumOptions,
  ) {
    const runs: SlotRuns = {
      free: (actorId) => this.free(actorId),
      reserve: (actorId) => this.slotsOf(actorId).running++,
      unreserve: (actorId, count = 1) => (this.slotsOf(actorId).running -= count),
      release: (actor) => this.release(actor),
      pump: (actor) => this.pump(actor),
      noteQueued: (actorId) => this.noteQueued(actorId),
      starting: (start) => this.tracker.starting(start),
      launch: (actor, episode, grant, run) => this.launch(actor, episode, grant, run),
    };
    this.queuePump = new QueuePump(
      runner,
      store,
      queue,
      queuedBegins,
      identity,
      events,
      mode,
      runs,
      this.logger,
    );
    this.flowPump = new FlowPump(
      admissions,
      runner,
      throttledInserts,
      options.env,
      runs,
      this.logger,
    );
    this.handover = new RestartHandover(registry, claims, runner, runs, this.logger);
    this.waitingTriggers = new WaitingTriggers(runner, runs);
  }

  onApplicationBootstrap(): Promise<void> {
    return this.queuePump.watchBacklog();
  }

  /**
   * Creates (or queues, or drops) one episode for a trigger, under the actor's concurrency limit.
   */
  async dispatch(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<SlotResult> {
    const actor = this.registry.get(expectation.actorId);
    if (!actor)
      throw new ActorDefinitionError(`actor ${expectation.actorId} is not hosted on this node`);
    // Draining: every other node received the same trigger; a manual caller hears busy.
    if (!this.tracker.open) return { status: 'busy' };
    const flow = episodeFlow(expectation, trigger, this.logger);
    const spec: Omit<NewEpisode, 'status'> = {
      actorId: actor.id,
      expectationId: expectation.id,
      trigger,
      dedupeKey: options.dedupeKey,
      ownerNode: this.identity.name(),
      maxAttempts: expectation.options.maxAttempts ?? 3,
      sourceStack: options.sourceStack,
      sourceEnv: options.sourceEnv,
      insertBefore: options.insertBefore,
      flow,
      version: expectation.options.version ?? null,
    };
    // A limited expectation's episode starts only through the admission, wherever slots are free.
    if (flow) return this.flowPump.enqueue(actor, expectation, spec, flow);
    const slots = this.slotsOf(actor.id);
    if (slots.running >= actor.options.maxConcurrentEpisodes) {
      const waited =
        options.waitForSlot && actor.options.overflow === 'queue'
          ? this.waitingTriggers.wait(actor, spec)
          : null;
      if (!waited) return this.queuePump.enqueue(actor, spec);
      options.onWait?.(waited.withdraw);
      return waited.result;
    }
    slots.running++;
    const begun = await this.tracker
      .starting(this.runner.begin({ ...spec, status: 'running' }))
      .catch((error: unknown) => {
        this.release(actor);
        throw error;
      });
    if (begun.status !== 'started') {
      // Expected under load and on every duplicate trigger: never above debug.
      const why =
        begun.status === 'busy'
          ? 'its claim has a live holder'
          : 'an episode with this dedupe key exists';
      this.logger.debug(`not started ${actor.id} (${options.dedupeKey}): ${why}`);
      this.release(actor);
      return begun;
    }
    this.launch(actor, begun.episode, begun.grant, { resumed: false, inserted: true });
    return { status: 'started', episode: begun.episode };
  }

  /**
   * Takes a restart recovery handed over with its claim: it runs under the actor's limit like a
   * fresh trigger, waits when every slot is busy (never dropped or shed), and its claim is renewed
   * meanwhile, so every peer finds it busy. One whose claim is lost while it waits is let go: it is
   * recoverable again, by anyone. One handed over once the drain began (a sweep in flight when it
   * did) waits for the drain, which stamps it and gives its claim up in the database, like every
   * restart still waiting: let go in memory only, it would hold peers off for a lease and more.
   */
  resume(episode: EpisodeRow, grant: AcquireResult): void {
    const taken = this.handover.take(episode, grant);
    if (!taken) return;
    this.slotsOf(taken.actor.id).restarts.push(taken.waiting);
    this.pump(taken.actor);
  }

  /**
   * This node may have queued episodes of `actorId` in the table (its own, adopted, or from before
   * a restart).
   */
  noteQueued(actorId: string): void {
    const actor = this.registry.get(actorId);
    if (!actor) return;
    this.queuePump.noteQueued(actor.id);
    this.pump(actor);
  }

  /**
   * A throttled episode of `actorId` may have become startable (a wake-up of a limited expectation
   * parked by the poller): the flow queue looks at once.
   */
  noteThrottled(actorId: string): void {
    const actor = this.registry.get(actorId);
    if (!actor) return;
    this.flowPump.note(actor.id);
    this.pump(actor);
  }

  /**
   * Every actor with limits looks at its throttled episodes (the trigger poller, at each poll).
   */
  lookAtThrottled(): void {
    for (const actor of this.registry.all()) {
      if (FlowPump.limited(actor).length === 0) continue;
      this.flowPump.note(actor.id);
      this.pump(actor);
    }
  }

  /**
   * A full peer queued an episode of `actorId` and offered it here (TriggerPlacement): take rows
   * from peers' queues whenever a slot is free and this node's own queue is empty, until none is
   * left.
   */
  noteOffered(actorId: string): void {
    const actor = this.registry.get(actorId);
    if (!actor) return;
    this.queuePump.noteOffered(actor.id);
    this.flowPump.note(actor.id);
    this.pump(actor);
  }

  /**
   * True when this node hosts the expectation (its actor, with this expectation in this node's
   * release of it).
   */
  hosts(actorId: string, expectationId: string): boolean {
    return this.registry.expectation(actorId, expectationId) !== undefined;
  }

  /**
   * Episodes of `actorId` waiting in this node's memory for a slot: restarts handed over, bus
   * triggers held back.
   */
  waiting(actorId: string): number {
    return (this.slots.get(actorId)?.restarts.length ?? 0) + this.waitingTriggers.count(actorId);
  }

  /** False once the node drains: nothing new starts (or is deferred) here. */
  get open(): boolean {
    return this.tracker.open;
  }

  /** Slots of `actorId` free now, counting the restarts already waiting for one. */
  free(actorId: string): number {
    const actor = this.registry.get(actorId);
    if (!actor || !this.tracker.open) return 0;
    const slots = this.slotsOf(actorId);
    return Math.max(0, actor.options.maxConcurrentEpisodes - slots.running - slots.restarts.length);
  }

  /**
   * Runs an episode that `start` begins (a deferred one a full node took) in one of the actor's
   * slots, reserved first; false when none is free. The start counts for the drain like any other.
   */
  runStarted(
    actorId: string,
    start: () => Promise<{
      episode: EpisodeRow;
      grant: AcquireResult;
      resumed: boolean;
      takenOver?: boolean;
    } | null>,
  ): boolean {
    const actor = this.registry.get(actorId);
    if (!actor || this.free(actorId) < 1) return false;
    this.slotsOf(actorId).running++;
    void this.tracker.starting(start()).then(
      (begun) => {
        // Launched even when the drain began meanwhile: it waits for this start, then stamps the
        // run.
        if (begun)
          return this.launch(actor, begun.episode, begun.grant, {
            resumed: begun.resumed,
            takenOver: begun.takenOver,
          });
        this.release(actor);
      },
      (error: unknown) => {
        logStartFailure(this.logger, `a deferred episode of ${actorId}`, error);
        this.release(actor);
      },
    );
    return true;
  }

  /**
   * `listener` hears the actor of each slot that frees while the node is open, after the slots' own
   * waiting work (restarts, triggers in memory, the queue) had its turn; returns the unsubscribe.
   */
  onSlotFreed(listener: (actorId: string) => void): () => void {
    this.freedListeners.add(listener);
    return () => this.freedListeners.delete(listener);
  }

  /** The drain: nothing new starts here from now on. */
  stopAccepting(): void {
    this.tracker.close();
    this.queuePump.stopWatching();
    this.flowPump.stop();
    this.waitingTriggers.releaseAll();
  }

  /**
   * Resolves once every start under way (insert, dequeue, restart) has either launched its run or
   * given up.
   */
  startsSettled(): Promise<void> {
    return this.tracker.startsSettled();
  }

  /** Hands the drain every restart still waiting for a slot; they will not start here. */
  takeWaitingRestarts(): WaitingRestart[] {
    return [...this.slots.values()].flatMap((slots) => slots.restarts.splice(0));
  }

  /** Resolves once every run this node started has ended. */
  idle(): Promise<void> {
    return this.tracker.idle();
  }

  /**
   * The slot frees when the method returns (or, failing before it runs, when the run ends): the
   * next begin overlaps this end.
   */
  private launch(
    actor: RegisteredActor,
    episode: EpisodeRow,
    grant: AcquireResult,
    run: RunOptions = { resumed: false },
  ): void {
    let held = true;
    const free = () => {
      if (!held) return;
      held = false;
      this.release(actor);
    };
    this.tracker.running(
      this.runner
        .run(episode, actor.expectations.get(episode.expectationId), grant, {
          ...run,
          returned: free,
        })
        .finally(() => {
          free();
          // A limited episode's end (written by now) freed its key's place: the flow queue looks,
          // unless the end found nothing throttled (FlowQuiet).
          if (episode.flowKey !== null && !this.flowQuiet.take(episode.id))
            this.noteThrottled(actor.id);
        }),
    );
  }

  private release(actor: RegisteredActor): void {
    this.slotsOf(actor.id).running--;
    this.pump(actor);
    if (this.tracker.open) for (const listener of this.freedListeners) listener(actor.id);
  }

  /**
   * Fills free slots: waiting restarts first, then the triggers waiting in memory, then this node's
   * queue in the table, oldest first, then what peers offered.
   */
  private pump(actor: RegisteredActor): void {
    if (!this.tracker.open) return;
    const slots = this.slotsOf(actor.id);
    while (slots.running < actor.options.maxConcurrentEpisodes && slots.restarts.length > 0) {
      const waiting = slots.restarts.shift() as WaitingRestart;
      if (waiting.hold.lost) continue;
      slots.running++;
      void this.handover.start(actor, waiting);
    }
    while (
      slots.running < actor.options.maxConcurrentEpisodes &&
      this.waitingTriggers.startNext(actor)
    );
    if (slots.running < actor.options.maxConcurrentEpisodes) this.queuePump.take(actor);
    // Throttled rows start only where the actor runs (`full`), as the queue's do.
    if (this.free(actor.id) > 0 && this.mode.of(actor.id) === 'full') this.flowPump.take(actor);
  }

  private slotsOf(actorId: string): Slots {
    let slots = this.slots.get(actorId);
    if (!slots) {
      slots = { running: 0, restarts: [] };
      this.slots.set(actorId, slots);
    }
    return slots;
  }
}
