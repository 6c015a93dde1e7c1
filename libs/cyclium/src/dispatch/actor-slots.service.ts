import { Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { ClaimHold } from '../claims/claim-hold.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { errorMessage } from '../sql/database-errors.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeRunner, type BeginResult } from '../episodes/episode-runner.service.js';
import { EpisodeQueue } from '../episodes/episode-queue.js';
import { EpisodeStore, type NewEpisode } from '../episodes/episode-store.js';
import { Mode } from './mode.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import { RunTracker } from './run-tracker.js';
import { claimKeyOf } from '../claims/claim-keys.js';

/** What the slots did with a trigger this node runs itself. */
export type SlotResult =
  { status: 'started'; episode: EpisodeRow } | { status: 'queued'; episode: EpisodeRow } | { status: 'dropped' } | { status: 'duplicate' } | { status: 'busy' };

export interface DispatchOptions {
  dedupeKey: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
}

/** A restart recovery handed to this node, waiting for a slot with its claim renewed meanwhile. */
export interface WaitingRestart {
  episode: EpisodeRow;
  grant: AcquireResult;
  hold: ClaimHold;
}

const QUEUE_RETRY_MS = 1_000;

interface Slots {
  running: number;
  /** Recovered episodes waiting here (still `running`, phase `recovering`), oldest first; they go before the queue. */
  restarts: WaitingRestart[];
  /** This node may have queued rows of the actor in the table; false once a dequeue came back empty. */
  maybeQueued: boolean;
  /** How often a queued row was noted: a dequeue that comes back empty clears `maybeQueued` only if none was noted meanwhile. */
  notes: number;
  /** A full peer offered this node a row it queued: this node takes from peers' queues while it has a slot and its own queue is empty. */
  offered: boolean;
  /** How often an offer was noted: a take that comes back empty clears `offered` only if none was noted meanwhile. */
  offers: number;
  /** One dequeue (own queue or a peer's) at a time per actor, so this node never races itself for its own rows. */
  dequeuing: boolean;
  /** A look at the queue booked for later, after one that could not take the oldest row. */
  retry: NodeJS.Timeout | undefined;
  /** The last dequeue met a claim held elsewhere (warned once per streak, not once per look). */
  headBusy: boolean;
}

/**
 * Where triggers become running episodes: each actor's concurrency limit on this node, its queue
 * (the table: rows `queued` with this node as owner, taken oldest first as slots free, so a node
 * that restarts under the same identity resumes its backlog and memory holds no queue), the rows
 * full peers offered it (taken from their queues once its own is empty), and the
 * restarts recovery hands over with their claims. A draining node starts nothing new, and the
 * drain can wait for every start already under way.
 */
@Injectable()
export class ActorSlots implements OnApplicationBootstrap {
  private readonly logger = new Logger('ActorHost');
  private readonly slots = new Map<string, Slots>();
  private readonly tracker = new RunTracker();
  private accepting = true;
  private readonly offModeChanges: Array<() => void> = [];

  constructor(
    private readonly registry: ActorRegistry,
    private readonly runner: EpisodeRunner,
    private readonly store: EpisodeStore,
    private readonly queue: EpisodeQueue,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly events: EventOutbox,
    private readonly mode: Mode,
  ) {}

  /**
   * A node that restarts under the same identity finds its backlog in the table and runs it; so
   * does a node (or an actor) switched to full at runtime: its queue from before, kept while it ran nothing.
   */
  async onApplicationBootstrap(): Promise<void> {
    this.offModeChanges.push(
      this.mode.onChange((mode) => {
        if (mode === 'full') this.pickUpBacklogSoon();
      }),
      this.mode.onActorChange((actorId) => {
        if (this.mode.of(actorId) === 'full') this.pickUpBacklogSoon(actorId);
      }),
    );
    await this.pickUpBacklog();
  }

  /** Notes each actor that runs here in full mode (only `actorId`, when given) and has rows in this node's queue. */
  private async pickUpBacklog(actorId?: string): Promise<void> {
    for (const queued of await this.queue.actorsWithQueued(this.identity.name())) {
      if ((actorId === undefined || queued === actorId) && this.mode.of(queued) === 'full') this.noteQueued(queued);
    }
  }

  private pickUpBacklogSoon(actorId?: string): void {
    this.pickUpBacklog(actorId).catch((error: unknown) =>
      this.logger.warn(`could not read this node's queue after a switch to full: ${errorMessage(error)}; it starts at the next trigger or restart`),
    );
  }

  /** Creates (or queues, or drops) one episode for a trigger, under the actor's concurrency limit. */
  async dispatch(expectation: RegisteredExpectation, trigger: EpisodeTrigger, options: DispatchOptions): Promise<SlotResult> {
    const actor = this.registry.get(expectation.actorId);
    if (!actor) throw new ActorDefinitionError(`actor ${expectation.actorId} is not hosted on this node`);
    // Draining: every other node received the same trigger; a manual caller hears busy.
    if (!this.accepting) return { status: 'busy' };
    const spec: Omit<NewEpisode, 'status'> = {
      actorId: actor.id,
      expectationId: expectation.id,
      trigger,
      dedupeKey: options.dedupeKey,
      ownerNode: this.identity.name(),
      maxAttempts: expectation.options.maxAttempts ?? 3,
      sourceStack: options.sourceStack,
      sourceEnv: options.sourceEnv,
    };
    const slots = this.slotsOf(actor.id);
    if (slots.running >= actor.options.maxConcurrentEpisodes) return this.overflow(actor, spec);
    slots.running++;
    const begun = await this.starting(this.runner.begin({ ...spec, status: 'running' })).catch((error: unknown) => {
      this.release(actor);
      throw error;
    });
    if (begun.status !== 'started') {
      this.logger.debug(`${begun.status}: ${options.dedupeKey} (another node has it)`);
      this.release(actor);
      return begun;
    }
    this.launch(actor, begun.episode, begun.grant);
    return { status: 'started', episode: begun.episode };
  }

  private async overflow(actor: RegisteredActor, spec: Omit<NewEpisode, 'status'>): Promise<SlotResult> {
    const node = this.identity.name();
    if (actor.options.overflow === 'drop') {
      const { payload } = lifecycleEvent('episode.dropped', { ...spec, id: null, workflowInstanceId: null, workflowStepId: null }, 'dropped', node);
      this.events.announce('episode.dropped', payload);
      return { status: 'dropped' };
    }
    if (actor.options.overflow === 'shed_oldest' && (await this.queue.queuedCount(actor.id, node)) >= actor.options.maxQueued) {
      await this.runner.shedOldest(actor.id);
    }
    const episode = await this.store.insert({ ...spec, status: 'queued' });
    if (!episode) return { status: 'duplicate' };
    this.events.announce('episode.queued', lifecycleEvent('episode.queued', episode, 'queued', node).payload);
    // A slot may have freed while we were inserting.
    this.noteQueued(actor.id);
    return { status: 'queued', episode };
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
    const actor = this.registry.get(episode.actorId);
    const hold = this.claims.hold(claimKeyOf(episode), grant);
    if (!actor) {
      // Recovery only hands over actors this node hosts: anything else is let go.
      hold.release();
      return;
    }
    this.slotsOf(actor.id).restarts.push({ episode, grant, hold });
    this.pump(actor);
  }

  /** This node may have queued episodes of `actorId` in the table (its own, adopted, or from before a restart). */
  noteQueued(actorId: string): void {
    const actor = this.registry.get(actorId);
    if (!actor) return;
    const slots = this.slotsOf(actor.id);
    slots.maybeQueued = true;
    slots.notes++;
    this.pump(actor);
  }

  /**
   * A full peer queued an episode of `actorId` and offered it here (TriggerPlacement): take rows
   * from peers' queues whenever a slot is free and this node's own queue is empty, until none is left.
   */
  noteOffered(actorId: string): void {
    const actor = this.registry.get(actorId);
    if (!actor) return;
    const slots = this.slotsOf(actor.id);
    slots.offered = true;
    slots.offers++;
    this.pump(actor);
  }

  /** True when this node hosts the actor. */
  hosts(actorId: string): boolean {
    return this.registry.get(actorId) !== undefined;
  }

  /** False once the node drains: nothing new starts (or is deferred) here. */
  get open(): boolean {
    return this.accepting;
  }

  /** Slots of `actorId` free now, counting the restarts already waiting for one. */
  free(actorId: string): number {
    const actor = this.registry.get(actorId);
    if (!actor || !this.accepting) return 0;
    const slots = this.slotsOf(actorId);
    return Math.max(0, actor.options.maxConcurrentEpisodes - slots.running - slots.restarts.length);
  }

  /**
   * Runs an episode that `start` begins (a deferred one a full node took) in one of the actor's
   * slots, reserved first; false when none is free. The start counts for the drain like any other.
   */
  runStarted(actorId: string, start: () => Promise<{ episode: EpisodeRow; grant: AcquireResult; resumed: boolean } | null>): boolean {
    const actor = this.registry.get(actorId);
    if (!actor || this.free(actorId) < 1) return false;
    this.slotsOf(actorId).running++;
    void this.starting(start()).then(
      (begun) => {
        // Launched even when the drain began meanwhile: it waits for this start, then stamps the run.
        if (begun) return this.launch(actor, begun.episode, begun.grant, undefined, begun.resumed);
        this.release(actor);
      },
      (error: unknown) => {
        this.logger.error(`could not start a deferred episode of ${actorId}: ${errorMessage(error)}`);
        this.release(actor);
      },
    );
    return true;
  }

  /** The drain: nothing new starts here from now on. */
  stopAccepting(): void {
    this.accepting = false;
    for (const off of this.offModeChanges.splice(0)) off();
  }

  /** Resolves once every start under way (insert, dequeue, restart) has either launched its run or given up. */
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

  private starting<T>(start: Promise<T>): Promise<T> {
    return this.tracker.starting(start);
  }

  private launch(actor: RegisteredActor, episode: EpisodeRow, grant: AcquireResult, restart?: WaitingRestart, resumed = false): void {
    this.tracker.running(
      this.runner
        .run(episode, actor.expectations.get(episode.expectationId), grant, restart ? { resumed: true, hold: restart.hold } : { resumed })
        .finally(() => this.release(actor)),
    );
  }

  private release(actor: RegisteredActor): void {
    this.slotsOf(actor.id).running--;
    this.pump(actor);
  }

  /** Fills free slots: waiting restarts first, then this node's queue in the table, oldest first, then what peers offered. */
  private pump(actor: RegisteredActor): void {
    if (!this.accepting) return;
    const slots = this.slotsOf(actor.id);
    while (slots.running < actor.options.maxConcurrentEpisodes && slots.restarts.length > 0) {
      const waiting = slots.restarts.shift() as WaitingRestart;
      if (waiting.hold.lost) continue;
      slots.running++;
      void this.startRestart(actor, waiting);
    }
    if (slots.running < actor.options.maxConcurrentEpisodes && (slots.maybeQueued || slots.offered) && !slots.dequeuing) {
      slots.dequeuing = true;
      slots.running++;
      // Both handle the database's failures themselves: anything else is a bug, logged rather than unhandled.
      const take = slots.maybeQueued ? this.startQueued(actor) : this.startFromPeer(actor);
      void take
        .catch((error: unknown) => this.logger.error(`could not take a queued episode of ${actor.id}: ${errorMessage(error)}`))
        .finally(() => {
          slots.dequeuing = false;
          this.pump(actor);
        });
    }
  }

  /**
   * Takes the newest row a peer queued: the full node keeps it durable until then, so a take that
   * fails or finds its claim held elsewhere leaves it where it is (its owner runs it when it frees).
   */
  private async startFromPeer(actor: RegisteredActor): Promise<void> {
    const slots = this.slotsOf(actor.id);
    const offers = slots.offers;
    let begun: BeginResult;
    try {
      begun = await this.starting(this.runner.beginFromPeer(actor.id));
    } catch (error) {
      this.logger.warn(`could not take a queued episode of ${actor.id} from a peer: ${errorMessage(error)}; it stays in that peer's queue`);
      begun = { status: 'duplicate' };
    }
    if (begun.status === 'started') {
      this.logger.debug(`took queued episode ${begun.episode.id} of ${actor.id} from a full peer`);
      return this.launch(actor, begun.episode, begun.grant);
    }
    // None left (or its claim is held elsewhere): stop looking until the next offer, unless one came meanwhile.
    slots.offered = slots.offers !== offers;
    slots.running--;
  }

  private async startRestart(actor: RegisteredActor, waiting: WaitingRestart): Promise<void> {
    try {
      const episode = await this.starting(this.runner.startResumed(waiting.episode, waiting.grant));
      if (episode) return this.launch(actor, episode, waiting.grant, waiting);
      waiting.hold.release();
    } catch (error) {
      this.logger.error(`could not start recovered episode ${waiting.episode.id}: ${errorMessage(error)}`);
      waiting.hold.release();
    }
    this.release(actor);
  }

  private async startQueued(actor: RegisteredActor): Promise<void> {
    const slots = this.slotsOf(actor.id);
    const notes = slots.notes;
    let begun: BeginResult;
    try {
      begun = await this.starting(this.runner.beginQueued(actor.id));
    } catch (error) {
      // The database is away, say: the backlog stays in the table.
      this.logger.warn(`could not start a queued episode of ${actor.id}: ${errorMessage(error)}; retrying in ${QUEUE_RETRY_MS} ms`);
      return this.lookAgainLater(actor, slots);
    }
    if (begun.status === 'busy') {
      // Its claim is live on another node, which ends it or lets it lapse: nothing will note this
      // queue when that happens, so the row (and every row behind it) would wait for the next trigger.
      if (!slots.headBusy) this.logger.warn(`the oldest queued episode of ${actor.id} has a claim held elsewhere; looking again every ${QUEUE_RETRY_MS} ms`);
      slots.headBusy = true;
      return this.lookAgainLater(actor, slots);
    }
    slots.headBusy = false;
    if (begun.status === 'started') return this.launch(actor, begun.episode, begun.grant);
    // Nothing left: look again when something is queued. A row queued while this dequeue was in
    // flight may have committed after its snapshot, so it was noted but not seen: look once more.
    slots.maybeQueued = slots.notes !== notes;
    slots.running--;
  }

  private lookAgainLater(actor: RegisteredActor, slots: Slots): void {
    slots.running--;
    slots.maybeQueued = false;
    if (slots.retry) return;
    slots.retry = setTimeout(() => {
      slots.retry = undefined;
      this.noteQueued(actor.id);
    }, QUEUE_RETRY_MS);
    slots.retry.unref();
  }

  private slotsOf(actorId: string): Slots {
    let slots = this.slots.get(actorId);
    if (!slots) {
      slots = { running: 0, restarts: [], maybeQueued: false, notes: 0, offered: false, offers: 0, dequeuing: false, retry: undefined, headBusy: false };
      this.slots.set(actorId, slots);
    }
    return slots;
  }
}
