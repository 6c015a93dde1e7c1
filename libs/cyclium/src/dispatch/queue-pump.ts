import type { Logger } from '@nestjs/common';
import type { EventOutbox } from '../bus/event-outbox.service.js';
import { OutageLog, errorMessage } from '../sql/database-errors.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { BeginResult, EpisodeRunner } from '../episodes/episode-runner.service.js';
import type { EpisodeQueue } from '../episodes/episode-queue.js';
import type { QueuedBegins } from '../episodes/queued-begins.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import type { EpisodeStore } from '../episodes/episode-store.js';
import type { NewEpisode } from '../episodes/episode-inserts.js';
import type { NodeIdentity } from '../identity/node-identity.service.js';
import type { RegisteredActor } from '../actors/registered-actor.js';
import type { Mode } from './mode.service.js';
import type { SlotRuns } from './slot-runs.interface.js';

const QUEUE_RETRY_MS = 1_000;
/** Rows one take moves at most, however many slots are free. */
const TAKE_MAX = 64;

/** What became of a trigger that found every slot busy. */
export type QueueResult =
  { status: 'queued'; episode: EpisodeRow } | { status: 'dropped' } | { status: 'duplicate' };

/**
 * What a take started (or found busy), and how many rows it asked for: fewer started means the
 * queue had no more.
 */
interface Take {
  begun: BeginResult[];
  asked: number;
}

interface QueueState {
  /**
   * This node may have queued rows of the actor in the table; false once a dequeue came back empty.
   */
  maybeQueued: boolean;
  /**
   * How often a queued row was noted: a dequeue that comes back empty clears `maybeQueued` only if
   * none was noted meanwhile.
   */
  notes: number;
  /**
   * A full peer offered this node a row it queued: this node takes from peers' queues while it has
   * a slot and its own queue is empty.
   */
  offered: boolean;
  /**
   * How often an offer was noted: a take that comes back empty clears `offered` only if none was
   * noted meanwhile.
   */
  offers: number;
  /**
   * One dequeue (own queue or a peer's) at a time per actor, so this node never races itself for
   * its own rows.
   */
  dequeuing: boolean;
  /** A look at the queue booked for later, after one that could not take the oldest row. */
  retry: NodeJS.Timeout | undefined;
  /** The last dequeue met a claim held elsewhere (said once per streak, not once per look). */
  headBusy: boolean;
  /**
   * Dequeues failing (the database away): one warning per streak, then one line when they work
   * again.
   */
  outage: OutageLog;
}

/**
 * The queue in the table: a trigger that finds every slot busy waits there (or is dropped, or
 * sheds the oldest), and free slots are filled from it: this node's queue (rows `queued` with this
 * node as owner, oldest first, so a node that restarts under the same identity resumes its backlog
 * and memory holds no queue), then the rows full peers offered it, taken from their queues once
 * its own is empty.
 */
export class QueuePump {
  private readonly queues = new Map<string, QueueState>();
  private readonly offModeChanges: Array<() => void> = [];

  constructor(
    private readonly runner: EpisodeRunner,
    private readonly store: EpisodeStore,
    private readonly queue: EpisodeQueue,
    private readonly queuedBegins: QueuedBegins,
    private readonly identity: NodeIdentity,
    private readonly events: EventOutbox,
    private readonly mode: Mode,
    private readonly slots: SlotRuns,
    private readonly logger: Logger,
  ) {}

  /**
   * A node that restarts under the same identity finds its backlog in the table and runs it; so
   * does a node (or an actor) switched to full at runtime: its queue from before, kept while it ran
   * nothing.
   */
  async watchBacklog(): Promise<void> {
    this.offModeChanges.push(
      this.mode.onChange((mode) => {
        if (mode === 'full') this.pickUpBacklogSoon();
      }),
      this.mode.onActorChange((actorId) => {
        if (this.mode.of(actorId) === 'full') this.pickUpBacklogSoon(actorId);
      }),
    );
    await this.pickUpBacklog(undefined, (owner) => this.queue.backlogAtBoot(owner));
  }

  /** The drain: mode switches pick up no backlog any more. */
  stopWatching(): void {
    for (const off of this.offModeChanges.splice(0)) off();
  }

  /**
   * Notes each actor that runs here in full mode (only `actorId`, when given) and has rows in this
   * node's queue.
   */
  private async pickUpBacklog(
    actorId?: string,
    read = (me: string) => this.queue.actorsWithQueued(me),
  ): Promise<void> {
    for (const queued of await read(this.identity.name())) {
      if ((actorId === undefined || queued === actorId) && this.mode.of(queued) === 'full')
        this.slots.noteQueued(queued);
    }
  }

  private pickUpBacklogSoon(actorId?: string): void {
    this.pickUpBacklog(actorId).catch((error: unknown) =>
      this.logger.warn(
        `could not read this node's queue after a switch to full: ${errorMessage(error)}; it ` +
          `starts at the next trigger or restart`,
      ),
    );
  }

  /** This node may have queued rows of `actorId` in the table. */
  noteQueued(actorId: string): void {
    const queue = this.stateOf(actorId);
    queue.maybeQueued = true;
    queue.notes++;
  }

  /** A full peer queued a row of `actorId` and offered it here. */
  noteOffered(actorId: string): void {
    const queue = this.stateOf(actorId);
    queue.offered = true;
    queue.offers++;
  }

  /**
   * Queues (or drops) a trigger that found every slot of the actor busy, per its `overflow` option.
   */
  async enqueue(actor: RegisteredActor, spec: Omit<NewEpisode, 'status'>): Promise<QueueResult> {
    const node = this.identity.name();
    if (actor.options.overflow === 'drop') {
      const { payload } = lifecycleEvent(
        'episode.dropped',
        { ...spec, id: null, workflowInstanceId: null, workflowStepId: null },
        'dropped',
        node,
      );
      this.events.announce('episode.dropped', payload);
      return { status: 'dropped' };
    }
    if (
      actor.options.overflow === 'shed_oldest' &&
      (await this.queue.queuedCount(actor.id, node)) >= actor.options.maxQueued
    ) {
      await this.runner.shedOldest(actor.id);
    }
    const episode = await this.store.insert({ ...spec, status: 'queued' });
    if (!episode) return { status: 'duplicate' };
    this.events.announce(
      'episode.queued',
      lifecycleEvent('episode.queued', episode, 'queued', node).payload,
    );
    // A slot may have freed while we were inserting.
    this.slots.noteQueued(actor.id);
    return { status: 'queued', episode };
  }

  /**
   * Takes rows into the actor's free slots (the caller checked one is free), one per slot but one,
   * in one statement where the claims allow (QueuedBegins), unless there is nothing to take or a
   * take is under way: slots that free meanwhile are filled by the next take, together.
   */
  take(actor: RegisteredActor): void {
    const queue = this.stateOf(actor.id);
    if (!(queue.maybeQueued || queue.offered) || queue.dequeuing) return;
    queue.dequeuing = true;
    // One free slot stays out of the take while it is in flight, for a starter that cannot wait for
    // it (a deferred episode the poller takes, a fresh trigger): reserved by the take, it would
    // find none.
    const slots = this.queuedBegins.available
      ? Math.min(TAKE_MAX, Math.max(1, this.slots.free(actor.id) - 1))
      : 1;
    for (let i = 0; i < slots; i++) this.slots.reserve(actor.id);
    // Both handle the database's failures themselves: anything else is a bug, logged rather than
    // unhandled.
    const take = queue.maybeQueued
      ? this.startQueued(actor, queue, slots)
      : this.startFromPeer(actor, queue, slots);
    void take
      .catch((error: unknown) =>
        this.logger.error(`could not take a queued episode of ${actor.id}: ${errorMessage(error)}`),
      )
      .finally(() => {
        queue.dequeuing = false;
        this.slots.pump(actor);
      });
  }

  /**
   * Takes the newest row a peer queued: the full node keeps it durable until then, so a take that
   * fails or finds its claim held elsewhere leaves it where it is (its owner runs it when it
   * frees).
   */
  private async startFromPeer(
    actor: RegisteredActor,
    queue: QueueState,
    slots: number,
  ): Promise<void> {
    const offers = queue.offers;
    let take: Take;
    try {
      take = await this.slots.starting(this.begin(actor, slots, 'peer'));
    } catch (error) {
      this.logger.warn(
        `could not take a queued episode of ${actor.id} from a peer: ${errorMessage(error)}; it ` +
          `stays in that peer's queue`,
      );
      take = { begun: [], asked: 1 };
    }
    const started = this.launch(actor, take.begun, slots);
    if (started > 0)
      this.logger.debug(`took ${started} queued episode(s) of ${actor.id} from full peers`);
    // None left (or a claim is held elsewhere): stop looking until the next offer, unless one came
    // meanwhile.
    if (started < take.asked) queue.offered = queue.offers !== offers;
  }

  private async startQueued(
    actor: RegisteredActor,
    queue: QueueState,
    slots: number,
  ): Promise<void> {
    const notes = queue.notes;
    let take: Take;
    try {
      take = await this.slots.starting(this.begin(actor, slots, 'own'));
    } catch (error) {
      // The database is away, say: the backlog stays in the table.
      this.slots.unreserve(actor.id, slots);
      queue.outage.failed(error);
      return this.lookAgainLater(actor, queue);
    }
    queue.outage.succeeded();
    const started = this.launch(actor, take.begun, slots);
    if (take.begun.some((b) => b.status === 'busy')) {
      // Its claim is live on another node, which ends it or lets it lapse: nothing will note this
      // queue when that happens, so the row (and every row behind it) would wait for the next
      // trigger. Expected: debug only.
      if (!queue.headBusy)
        this.logger.debug(
          `the oldest queued episode of ${actor.id} has a claim held elsewhere; looking again ` +
            `every ${QUEUE_RETRY_MS} ms`,
        );
      queue.headBusy = true;
      return this.lookAgainLater(actor, queue);
    }
    queue.headBusy = false;
    // Fewer than asked: nothing left. Look again when something is queued; a row queued while this
    // take was in flight may have committed after its snapshot, so it was noted but not seen: look
    // once more.
    if (started < take.asked) queue.maybeQueued = queue.notes !== notes;
  }

  /**
   * Up to `slots` queued rows of the actor started, in one statement when it can be; one row at a
   * time otherwise, or when that statement met a busy claim (a lone take answers busy for its
   * head). Only rows of expectations this node runs: one its release here lacks waits for a node
   * that has it.
   */
  private async begin(actor: RegisteredActor, slots: number, from: 'own' | 'peer'): Promise<Take> {
    const ids = [...actor.expectations.keys()];
    if (this.queuedBegins.available) {
      const taken = await this.queuedBegins.take(actor.id, ids, slots, from);
      if (taken !== 'busy') return { begun: taken, asked: slots };
    }
    const runner = this.runner;
    const one = await (from === 'own'
      ? runner.beginQueued(actor.id, ids)
      : runner.beginFromPeer(actor.id, ids));
    return { begun: one.status === 'duplicate' ? [] : [one], asked: 1 };
  }

  /**
   * Launches the started ones in the slots reserved for them and gives the rest back; returns how
   * many started.
   */
  private launch(actor: RegisteredActor, begun: readonly BeginResult[], slots: number): number {
    let started = 0;
    for (const b of begun) {
      if (b.status !== 'started') continue;
      started++;
      this.slots.launch(actor, b.episode, b.grant);
    }
    this.slots.unreserve(actor.id, slots - started);
    return started;
  }

  private lookAgainLater(actor: RegisteredActor, queue: QueueState): void {
    queue.maybeQueued = false;
    if (queue.retry) return;
    queue.retry = setTimeout(() => {
      queue.retry = undefined;
      this.slots.noteQueued(actor.id);
    }, QUEUE_RETRY_MS);
    queue.retry.unref();
  }

  private stateOf(actorId: string): QueueState {
    let queue = this.queues.get(actorId);
    if (!queue) {
      const outage = new OutageLog(this.logger, `starting queued episodes of ${actorId}`);
      queue = {
        maybeQueued: false,
        notes: 0,
        offered: false,
        offers: 0,
        dequeuing: false,
        retry: undefined,
        headBusy: false,
        outage,
      };
      this.queues.set(actorId, queue);
    }
    return queue;
  }
}
