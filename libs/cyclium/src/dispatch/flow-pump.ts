import { runnableVersions } from '../versions/expectation-version.js';
import type { Logger } from '@nestjs/common';
import { OutageLog, errorMessage } from '../sql/database-errors.js';
import type { EpisodeRunner } from '../episodes/episode-runner.service.js';
import type { NewEpisode } from '../episodes/episode-inserts.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import type { Admission, AdmissionRequest, FlowAdmissions } from '../episodes/flow-admissions.js';
import type { ThrottledInserts, ThrottledStart } from '../episodes/throttled-inserts.js';
import { flowOf, isLimited, limitsOf, type EpisodeFlow } from '../episodes/flow-limits.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import type { QueueResult } from './queue-pump.js';
import type { SlotRuns } from './slot-runs.interface.js';

/** Rows one admission starts at most, however many slots are free. */
const TAKE_MAX = 64;
/** A look after one that failed (the database away) or met a busy claim. */
const RETRY_MS = 1_000;

interface FlowState {
  /** How often a throttled row may have become startable (a trigger, a freed slot, a poll). */
  notes: number;
  /** `notes` when the last admission that found nothing more to start began. */
  seen: number;
  /** One admission at a time per actor, so this node never races itself. */
  admitting: boolean;
  /** A look booked for when a rate window frees (or after a failure), and when it is due. */
  timer: NodeJS.Timeout | undefined;
  timerDue: number;
  /** Admissions failing (the database away): one warning per streak. */
  outage: OutageLog;
  /**
   * The expectations whose last admission here started rows: their next look admits at once.
   * Any other looks for a backlog first (FlowAdmissions.backlog), without the admission's lock.
   */
  backlogged: Set<string>;
}

/**
 * The partition and priority an episode of `expectation` stores, from its trigger; null for an
 * expectation without limits. A key function that fails is logged and the episode goes to the
 * '' partition: the trigger is never lost to it.
 */
export function episodeFlow(
  expectation: RegisteredExpectation,
  trigger: Pick<EpisodeTrigger, 'payload' | 'priority'>,
  logger: Logger,
): EpisodeFlow | null {
  return flowOf(expectation.options, trigger, (field, error) =>
    logger.warn(
      `${expectation.actorId}.${expectation.id}: ${field} failed (${errorMessage(error)}); the ` +
        `episode is limited with the keyless partition ''`,
    ),
  );
}

/**
 * The flow queue: episodes of limited expectations (`concurrency`, `rateLimit`) wait `throttled`
 * as rows any node hosting them may start, and this fills the actor's free slots on this node from
 * them through FlowAdmissions, where the database decides what the limits allow. It looks when a
 * row may have become startable here (a trigger throttled here, a slot of the actor freed, a
 * wake-up parked), at each poll of the trigger poller (another node's episode ended; the rows of a
 * restart or a whole-cluster stop), and when a rate window frees.
 */
export class FlowPump {
  private readonly states = new Map<string, FlowState>();

  constructor(
    private readonly admissions: FlowAdmissions,
    private readonly runner: EpisodeRunner,
    private readonly inserts: ThrottledInserts,
    /** The env this node serves: it admits that env's rows only (rule 8). */
    private readonly env: string | null,
    private readonly slots: SlotRuns,
    private readonly logger: Logger,
  ) {}

  /** The expectations of `actor` that declare limits. */
  static limited(actor: RegisteredActor): RegisteredExpectation[] {
    return [...actor.expectations.values()].filter((e) => isLimited(e.options));
  }

  /** The drain: no more looks. */
  stop(): void {
    for (const state of this.states.values()) clearTimeout(state.timer);
  }

  /** A throttled row of `actorId` may be startable now. */
  note(actorId: string): void {
    this.stateOf(actorId).notes++;
  }

  /**
   * Writes a trigger of a limited expectation as a `throttled` row (group-committed with others,
   * and without an `episode.queued` event: the row is what is visible). With a free slot here, the
   * insert's statement also admits what the limits allow into it, so the trigger starts in that
   * round trip when they allow it (`started`); otherwise it waits (`queued`) and starts here or on
   * any node as soon as they do.
   */
  async enqueue(
    actor: RegisteredActor,
    expectation: RegisteredExpectation,
    spec: Omit<NewEpisode, 'status'>,
    flow: EpisodeFlow,
  ): Promise<QueueResult | { status: 'started'; episode: EpisodeRow }> {
    const reserved = this.inserts.admitsInline && this.slots.free(actor.id) > 0;
    if (reserved) this.slots.reserve(actor.id);
    let written: ThrottledStart;
    try {
      written = await this.slots.starting(
        this.inserts.insert({ ...spec, flow }, reserved ? this.request(expectation, 1) : null),
      );
    } catch (error) {
      if (reserved) this.slots.unreserve(actor.id);
      throw error;
    }
    const { episode, admitted, unseen } = written;
    if (admitted)
      this.slots.launch(actor, admitted.episode, admitted.grant, { resumed: admitted.resumed });
    else if (reserved) this.slots.unreserve(actor.id);
    // A row left throttled that no admission looked at since: the flow queue looks now.
    if (unseen) {
      this.note(actor.id);
      this.slots.pump(actor);
    }
    if (!episode) return { status: 'duplicate' };
    if (admitted?.episode.id === episode.id)
      return { status: 'started', episode: admitted.episode };
    return { status: 'queued', episode };
  }

  /**
   * Starts what the limits allow into the actor's free slots (the caller checked one is free),
   * unless nothing was noted since the last admission that found no more, or one is under way.
   */
  take(actor: RegisteredActor): void {
    const state = this.stateOf(actor.id);
    if (state.admitting || state.notes === state.seen) return;
    const expectations = FlowPump.limited(actor);
    if (expectations.length === 0) return;
    if (this.slots.free(actor.id) < 1) return;
    state.admitting = true;
    const notes = state.notes;
    void this.slots
      .starting(this.lookInto(actor, state, expectations))
      .then(
        ({ more, retryMs }) => {
          state.outage.succeeded();
          if (!more) state.seen = notes;
          if (retryMs !== null) this.lookIn(actor, state, retryMs);
        },
        (error: unknown) => {
          state.outage.failed(error);
          this.lookIn(actor, state, RETRY_MS);
        },
      )
      .finally(() => {
        state.admitting = false;
        this.slots.pump(actor);
      });
  }

  /**
   * A look at the actor's limited expectations: first which have throttled rows this node may
   * start (FlowAdmissions.backlog, skipped where the last admission here started rows: a backlog is
   * then likely, and the probe a round trip more), holding no slot, so that while it is in flight
   * fresh triggers still find the free slots and start in their inserts (the usual look, after a
   * limited episode's end, finds nothing); then, only for those with a backlog, the slots are
   * reserved and admitted into. `more`: an admission filled every slot it was given, or the slots
   * were taken meanwhile, so more may be startable; `retryMs`: the soonest a rate window frees.
   */
  private async lookInto(
    actor: RegisteredActor,
    state: FlowState,
    expectations: readonly RegisteredExpectation[],
  ): Promise<{ more: boolean; retryMs: number | null }> {
    const backlogged: RegisteredExpectation[] = [];
    for (const expectation of expectations)
      if (
        state.backlogged.has(expectation.id) ||
        (await this.admissions.backlog(this.request(expectation, 1)))
      )
        backlogged.push(expectation);
    if (backlogged.length === 0) return { more: false, retryMs: null };
    const free = this.slots.free(actor.id);
    if (free < 1) return { more: true, retryMs: null };
    // One free slot stays out of the admission while it is in flight, for a fresh trigger of
    // another expectation (reserved here, it would find none and queue).
    const slots = Math.min(TAKE_MAX, Math.max(1, free - 1));
    for (let i = 0; i < slots; i++) this.slots.reserve(actor.id);
    const launched = { count: 0 };
    try {
      return await this.admitInto(actor, state, backlogged, slots, launched);
    } finally {
      this.slots.unreserve(actor.id, slots - launched.count);
    }
  }

  /**
   * Admits up to `slots` rows across `expectations` (one admission each, while slots remain) and
   * launches them in the slots reserved for them, counting each in `launched` as it goes (a later
   * admission that fails leaves the launched ones their slots).
   */
  private async admitInto(
    actor: RegisteredActor,
    state: FlowState,
    expectations: readonly RegisteredExpectation[],
    slots: number,
    launched: { count: number },
  ): Promise<{ more: boolean; retryMs: number | null }> {
    let more = false;
    let retryMs: number | null = null;
    for (const expectation of expectations) {
      const max = slots - launched.count;
      if (max < 1) {
        more = true;
        break;
      }
      const admission = await this.admit(expectation, max);
      if (admission === 'busy') {
        state.backlogged.delete(expectation.id);
        this.logger.debug(
          `an admission of ${actor.id}.${expectation.id} met a claim held elsewhere; looking ` +
            `again in ${RETRY_MS} ms`,
        );
        retryMs = Math.min(retryMs ?? RETRY_MS, RETRY_MS);
        continue;
      }
      if (admission.admitted.length > 0) state.backlogged.add(expectation.id);
      else state.backlogged.delete(expectation.id);
      for (const { episode, grant, resumed } of admission.admitted) {
        this.slots.launch(actor, episode, grant, { resumed });
        launched.count++;
      }
      if (admission.admitted.length === max) more = true;
      if (admission.retryMs !== null) retryMs = Math.min(retryMs ?? Infinity, admission.retryMs);
    }
    return { more, retryMs };
  }

  /**
   * One admission of `expectation`: in one statement with its claims where they allow it, else one
   * row per transaction (the claims adapter takes each claim beside the row).
   */
  private async admit(expectation: RegisteredExpectation, max: number): Promise<Admission> {
    const request = this.request(expectation, max);
    if (this.admissions.inOneStatement) return this.admissions.admit(request);
    const admitted: Extract<Admission, object>['admitted'] = [];
    let retryMs: number | null = null;
    while (admitted.length < max) {
      let resumed = false;
      const begun = await this.runner.beginAdmitted(async (client) => {
        const one = await this.admissions.admitWithin(client, { ...request, max: 1 });
        retryMs = one.retryMs;
        resumed = one.rows[0]?.resumed ?? false;
        return one.rows[0]?.episode ?? null;
      });
      if (begun.status === 'busy') return admitted.length > 0 ? { admitted, retryMs } : 'busy';
      if (begun.status !== 'started') break;
      admitted.push({ episode: begun.episode, grant: begun.grant, resumed });
    }
    return { admitted, retryMs };
  }

  private request(expectation: RegisteredExpectation, max: number): AdmissionRequest {
    return {
      actorId: expectation.actorId,
      expectationId: expectation.id,
      env: this.env,
      limits: limitsOf(expectation.options),
      max,
      versions: runnableVersions(expectation.options),
    };
  }

  private lookIn(actor: RegisteredActor, state: FlowState, ms: number): void {
    const due = performance.now() + ms;
    if (state.timer && state.timerDue <= due) return;
    clearTimeout(state.timer);
    state.timerDue = due;
    state.timer = setTimeout(() => {
      state.timer = undefined;
      this.note(actor.id);
      this.slots.pump(actor);
    }, ms);
    state.timer.unref();
  }

  private stateOf(actorId: string): FlowState {
    let state = this.states.get(actorId);
    if (!state) {
      state = {
        notes: 1,
        seen: 0,
        admitting: false,
        timer: undefined,
        timerDue: 0,
        outage: new OutageLog(this.logger, `starting throttled episodes of ${actorId}`),
        backlogged: new Set(),
      };
      this.states.set(actorId, state);
    }
    return state;
  }
}
