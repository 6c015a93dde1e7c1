import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { CronJob } from 'cron';
import type { BusEvent } from '../bus/bus.interface.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage, isDatabaseUnavailable } from '../database/database-errors.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeRunner, type BeginResult } from '../episodes/episode-runner.service.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import { ActorDefinitionError } from './actor-definition.error.js';
import { ActorRegistry } from './actor-registry.service.js';
import { eventKey, scheduleKey } from './dedupe-keys.js';
import { bucketStart } from './interval.js';
import type { RegisteredActor, RegisteredExpectation } from './registered-actor.js';
import { matchesFilter, readPath } from './trigger-filter.js';

export type DispatchResult =
  | { status: 'started'; episode: EpisodeRow }
  | { status: 'queued'; episode: EpisodeRow }
  | { status: 'dropped' }
  | { status: 'duplicate' }
  | { status: 'busy' };

export interface DispatchOptions {
  dedupeKey: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
  /** Sleep a random 0–jitterMs first, so the fastest node does not win every key. */
  jitter: boolean;
}

interface Waiting {
  id: string;
  /** Handed over by recovery: restarts with `resumed: true`, and is never shed. */
  resumed: boolean;
  /** Times its claim was found busy (see pump). */
  busyTries?: number;
}

/**
 * A recovered episode's claim can be busy for a moment: another node's sweep, working from a
 * candidate list it read just before this node took the episode, may hold the claim until its own
 * conditional take fails and it lets go. Retry briefly rather than leave the episode to go stale.
 */
const RESUME_RETRY_MS = 100;

const TRIGGER_RETRY_FIRST_MS = 200;
const TRIGGER_RETRY_MAX_MS = 5_000;

function describeTrigger(trigger: EpisodeTrigger): string {
  if (trigger.type === 'event') return `event ${trigger.eventId} "${trigger.eventType}"`;
  if (trigger.type === 'schedule') return `schedule ${trigger.scheduledAt}`;
  return trigger.type;
}
const RESUME_RETRIES = 50;

interface Slots {
  running: number;
  /** This node's waiting episodes, oldest first. */
  queue: Waiting[];
}

/**
 * Hosts this node's actors: turns triggers (bus events, wall-clock buckets, cron ticks) into
 * episodes with deterministic dedupe keys, and runs them under each actor's concurrency limit.
 * Every node does this for every trigger; the unique index lets one insert through.
 */
@Injectable()
export class ActorHost implements OnApplicationBootstrap {
  private readonly logger = new Logger(ActorHost.name);
  private readonly slots = new Map<string, Slots>();
  private readonly unsubscribes: Array<() => void> = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly cronJobs: Array<{ name: string; job: CronJob }> = [];
  private readonly debounces = new Map<string, NodeJS.Timeout>();
  private readonly cooldownUntil = new Map<string, number>();
  private readonly runs = new Set<Promise<void>>();
  private triggersOn = false;
  /** False once the node drains: nothing new starts here, so nothing escapes the drain's stamp. */
  private accepting = true;

  constructor(
    private readonly registry: ActorRegistry,
    private readonly runner: EpisodeRunner,
    private readonly store: EpisodeStore,
    private readonly identity: NodeIdentity,
    private readonly moduleRef: ModuleRef,
    private readonly events: EventOutbox,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onApplicationBootstrap(): void {
    if (this.options.mode !== 'full') return;
    this.triggersOn = true;
    for (const actor of this.registry.all()) {
      for (const expectation of actor.expectations.values()) this.startTrigger(actor, expectation);
    }
  }

  /** Stops every trigger source: subscriptions, interval timers, cron jobs, pending debounces. */
  async stopTriggers(): Promise<void> {
    this.triggersOn = false;
    this.accepting = false;
    this.unsubscribes.splice(0).forEach((off) => off());
    for (const timer of [...this.timers, ...this.debounces.values()]) clearTimeout(timer);
    this.timers.clear();
    this.debounces.clear();
    const registry = this.schedulerRegistry(false);
    for (const { name, job } of this.cronJobs.splice(0)) {
      await job.stop();
      if (registry?.doesExist('cron', name)) registry.deleteCronJob(name);
    }
  }

  /** Resolves once every run this node started has ended. */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.allSettled([...this.runs]);
  }

  /** Creates (or queues, or drops) one episode for a trigger, under the actor's concurrency limit. */
  async dispatch(expectation: RegisteredExpectation, trigger: EpisodeTrigger, options: DispatchOptions): Promise<DispatchResult> {
    const actor = this.registry.get(expectation.actorId);
    if (!actor) throw new ActorDefinitionError(`actor ${expectation.actorId} is not hosted on this node`);
    if (options.jitter && this.options.jitterMs > 0) {
      await new Promise((resolve) => setTimeout(resolve, Math.random() * this.options.jitterMs));
    }
    // Draining: every other node received the same trigger; a manual caller hears busy.
    if (!this.accepting) return { status: 'busy' };
    const spec = {
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
    if (slots.running < actor.options.maxConcurrentEpisodes) {
      slots.running++;
      let begun: BeginResult;
      try {
        begun = await this.runner.begin({ ...spec, status: 'running' });
      } catch (error) {
        this.release(actor);
        throw error;
      }
      if (begun.status !== 'started') {
        this.logger.debug(`${begun.status}: ${options.dedupeKey} (another node has it)`);
        this.release(actor);
        return begun;
      }
      this.launch(actor, begun);
      return { status: 'started', episode: begun.episode };
    }
    return this.overflow(actor, spec);
  }

  private async overflow(
    actor: RegisteredActor,
    spec: Omit<Parameters<EpisodeStore['insert']>[0], 'status'>,
  ): Promise<DispatchResult> {
    const node = this.identity.name();
    if (actor.options.overflow === 'drop') {
      const { payload } = lifecycleEvent('episode.dropped', { ...spec, id: null, workflowInstanceId: null, workflowStepId: null }, 'dropped', node);
      this.events.announce('episode.dropped', payload);
      return { status: 'dropped' };
    }
    const slots = this.slotsOf(actor.id);
    const sheddable = slots.queue.filter((w) => !w.resumed);
    if (actor.options.overflow === 'shed_oldest' && sheddable.length >= actor.options.maxQueued) {
      const oldest = sheddable[0];
      slots.queue.splice(slots.queue.indexOf(oldest), 1);
      await this.runner.cancelQueued(oldest.id);
    }
    const episode = await this.store.insert({ ...spec, status: 'queued' });
    if (!episode) return { status: 'duplicate' };
    slots.queue.push({ id: episode.id, resumed: false });
    this.events.announce('episode.queued', lifecycleEvent('episode.queued', episode, 'queued', node).payload);
    // A slot may have freed while we were inserting.
    this.pump(actor);
    return { status: 'queued', episode };
  }

  /**
   * Restarts an episode recovery took over: under the actor's concurrency limit like a fresh
   * trigger, queued when every slot is busy, never dropped or shed. Without a hosted actor it runs
   * directly (and fails as `unknown_actor`, recorded like any other failure).
   */
  resume(episode: EpisodeRow): void {
    const actor = this.registry.get(episode.actorId);
    if (!actor) {
      this.runner.beginResumed(episode.id).then(
        (begun) => {
          if (begun.status === 'started') this.track(this.runner.run(begun.episode, begun.grant, { resumed: true }));
        },
        (error: unknown) => this.logger.error(`could not start recovered episode ${episode.id}: ${errorMessage(error)}`),
      );
      return;
    }
    this.slotsOf(actor.id).queue.push({ id: episode.id, resumed: true });
    this.pump(actor);
  }

  /** Takes over a queued episode whose node is gone: it waits in this node's queue. */
  adoptQueued(episode: EpisodeRow): boolean {
    const actor = this.registry.get(episode.actorId);
    if (!actor) return false;
    this.slotsOf(actor.id).queue.push({ id: episode.id, resumed: false });
    this.pump(actor);
    return true;
  }

  /** Recovered episodes waiting here for a slot (still `running`, phase `recovering`). */
  pendingResumes(): string[] {
    return [...this.slots.values()].flatMap((s) => s.queue.filter((w) => w.resumed).map((w) => w.id));
  }

  private track(run: Promise<void>): void {
    const tracked = run.finally(() => this.runs.delete(tracked));
    this.runs.add(tracked);
  }

  private launch(actor: RegisteredActor, begun: Extract<BeginResult, { status: 'started' }>, resumed = false): void {
    this.track(this.runner.run(begun.episode, begun.grant, { resumed }).finally(() => this.release(actor)));
  }

  private release(actor: RegisteredActor): void {
    this.slotsOf(actor.id).running--;
    this.pump(actor);
  }

  /** Starts queued episodes while slots are free. */
  private pump(actor: RegisteredActor): void {
    if (!this.accepting) return;
    const slots = this.slotsOf(actor.id);
    while (slots.running < actor.options.maxConcurrentEpisodes && slots.queue.length > 0) {
      const waiting = slots.queue.shift() as Waiting;
      const { id, resumed } = waiting;
      slots.running++;
      (resumed ? this.runner.beginResumed(id) : this.runner.beginQueued(id)).then(
        (begun) => {
          if (begun.status === 'started') return this.launch(actor, begun, resumed);
          if (begun.status === 'busy' && resumed && (waiting.busyTries ?? 0) < RESUME_RETRIES) {
            const retry = setTimeout(() => {
              this.timers.delete(retry);
              slots.queue.unshift({ ...waiting, busyTries: (waiting.busyTries ?? 0) + 1 });
              this.pump(actor);
            }, RESUME_RETRY_MS);
            this.timers.add(retry);
          }
          this.release(actor);
        },
        (error: unknown) => {
          this.logger.error(`could not start ${resumed ? 'recovered' : 'queued'} episode ${id}: ${String(error)}`);
          this.release(actor);
        },
      );
    }
  }

  private slotsOf(actorId: string): Slots {
    let slots = this.slots.get(actorId);
    if (!slots) {
      slots = { running: 0, queue: [] };
      this.slots.set(actorId, slots);
    }
    return slots;
  }

  private startTrigger(actor: RegisteredActor, expectation: RegisteredExpectation): void {
    const trigger = expectation.options.trigger;
    if (trigger === 'manual' || trigger === 'workflow') return;
    if ('event' in trigger) {
      this.unsubscribes.push(this.events.subscribe(trigger.event, (event) => this.onEvent(expectation, event)));
    } else if ('every' in trigger) {
      this.scheduleEvery(expectation, expectation.intervalMs as number);
    } else {
      this.scheduleCron(actor, expectation, trigger.cron);
    }
  }

  private onEvent(expectation: RegisteredExpectation, event: BusEvent): void {
    const trigger = expectation.options.trigger as { event: string; filter?: Parameters<typeof matchesFilter>[0] };
    if (!matchesFilter(trigger.filter, event.payload)) return;
    const { subjectKey, debounceMs, cooldownMs } = expectation.options;
    const subject = `${expectation.actorId}\u0000${expectation.id}\u0000${subjectKey ? String(readPath(event.payload, subjectKey)) : ''}`;
    if ((this.cooldownUntil.get(subject) ?? 0) > Date.now()) return;
    const fire = () => {
      this.debounces.delete(subject);
      if (!this.triggersOn) return;
      if (cooldownMs) this.cooldownUntil.set(subject, Date.now() + cooldownMs);
      const env = this.options.env;
      void this.safeDispatch(
        expectation,
        { type: 'event', eventType: event.type, eventId: event.eventId, payload: event.payload },
        scopeKey(eventKey(expectation.actorId, expectation.id, event.type, event.eventId, event.payload), env),
      );
    };
    if (!debounceMs) return fire();
    // Trailing edge: every event for the subject restarts its quiet period; the last one runs.
    clearTimeout(this.debounces.get(subject));
    this.debounces.set(subject, setTimeout(fire, debounceMs));
  }

  /** Fires at the start of each wall-clock bucket, so every node computes the same bucket and key. */
  private scheduleEvery(expectation: RegisteredExpectation, intervalMs: number): void {
    const now = Date.now();
    const next = bucketStart(now, intervalMs) + intervalMs;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.triggersOn) return;
      this.scheduleEvery(expectation, intervalMs);
      this.fireSchedule(expectation, new Date(next));
    }, next - now);
    timer.unref();
    this.timers.add(timer);
  }

  private scheduleCron(actor: RegisteredActor, expectation: RegisteredExpectation, cronTime: string): void {
    const name = `cyclium:${actor.id}:${expectation.id}`;
    const job = CronJob.from({
      cronTime,
      timeZone: 'UTC',
      start: true,
      onTick: () => {
        // The tick to the minute: nodes whose timers fire a few ms apart agree on the bucket.
        this.fireSchedule(expectation, new Date(bucketStart(Date.now(), 60_000)));
      },
    });
    this.schedulerRegistry(true)?.addCronJob(name, job);
    this.cronJobs.push({ name, job });
  }

  private fireSchedule(expectation: RegisteredExpectation, bucket: Date): void {
    void this.safeDispatch(
      expectation,
      { type: 'schedule', payload: {}, scheduledAt: bucket.toISOString() },
      scopeKey(scheduleKey(expectation.actorId, expectation.id, bucket), this.options.env),
    );
  }

  /**
   * A trigger that meets an unreachable database is retried with backoff until it lands or the
   * node drains: every node received it, but if all of them dropped it during an outage, the event
   * (durably stored and acknowledged) would never become an episode. Any other failure drops it,
   * with the reason and the event id in the log.
   */
  private async safeDispatch(expectation: RegisteredExpectation, trigger: EpisodeTrigger, dedupeKey: string): Promise<void> {
    for (let attempt = 0, delay = TRIGGER_RETRY_FIRST_MS; ; attempt++) {
      try {
        await this.dispatch(expectation, trigger, {
          dedupeKey,
          sourceStack: this.options.stackSlug,
          sourceEnv: this.options.env,
          jitter: attempt === 0,
        });
        return;
      } catch (error) {
        const what = `trigger of ${expectation.actorId}.${expectation.id} (${describeTrigger(trigger)})`;
        if (!isDatabaseUnavailable(error) || !this.triggersOn) {
          this.logger.warn(`${what} dropped: ${errorMessage(error)}`);
          return;
        }
        if (attempt === 0) this.logger.warn(`${what} is waiting for the database (${errorMessage(error)}); retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, TRIGGER_RETRY_MAX_MS);
      }
    }
  }

  private schedulerRegistry(required: boolean): SchedulerRegistry | undefined {
    try {
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      if (!required) return undefined;
      throw new ActorDefinitionError('cron triggers need ScheduleModule.forRoot() imported once in the app');
    }
  }
}
