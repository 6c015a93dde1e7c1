import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { CronJob } from 'cron';
import { Bus, type BusEvent } from '../bus/bus.interface.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
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

interface Slots {
  running: number;
  /** Ids of this node's queued episodes, oldest first. */
  queue: string[];
}

/**
 * Hosts this node's actors: turns triggers (bus events, wall-clock buckets, cron ticks) into
 * episodes with deterministic dedupe keys, and runs them under each actor's concurrency limit.
 * Every node does this for every trigger; the unique index lets one insert through.
 */
@Injectable()
export class ActorHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(ActorHost.name);
  private readonly slots = new Map<string, Slots>();
  private readonly unsubscribes: Array<() => void> = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly cronJobs: Array<{ name: string; job: CronJob }> = [];
  private readonly debounces = new Map<string, NodeJS.Timeout>();
  private readonly cooldownUntil = new Map<string, number>();
  private readonly runs = new Set<Promise<void>>();
  private triggersOn = false;

  constructor(
    private readonly registry: ActorRegistry,
    private readonly runner: EpisodeRunner,
    private readonly store: EpisodeStore,
    private readonly identity: NodeIdentity,
    private readonly moduleRef: ModuleRef,
    @Inject(Bus) private readonly bus: Bus,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onApplicationBootstrap(): void {
    if (this.options.mode !== 'full') return;
    this.triggersOn = true;
    for (const actor of this.registry.all()) {
      for (const expectation of actor.expectations.values()) this.startTrigger(actor, expectation);
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stopTriggers();
  }

  /** Stops every trigger source: subscriptions, interval timers, cron jobs, pending debounces. */
  async stopTriggers(): Promise<void> {
    this.triggersOn = false;
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
      await this.bus.publish('episode.dropped', payload);
      return { status: 'dropped' };
    }
    const slots = this.slotsOf(actor.id);
    if (actor.options.overflow === 'shed_oldest' && slots.queue.length >= actor.options.maxQueued) {
      const oldest = slots.queue.shift() as string;
      const canceled = await this.store.cancelQueued(oldest);
      if (canceled) await this.bus.publish('episode.canceled', lifecycleEvent('episode.canceled', canceled, 'canceled', node).payload);
    }
    const episode = await this.store.insert({ ...spec, status: 'queued' });
    if (!episode) return { status: 'duplicate' };
    slots.queue.push(episode.id);
    await this.bus.publish('episode.queued', lifecycleEvent('episode.queued', episode, 'queued', node).payload);
    // A slot may have freed while we were inserting.
    this.pump(actor);
    return { status: 'queued', episode };
  }

  private launch(actor: RegisteredActor, begun: Extract<BeginResult, { status: 'started' }>, resumed = false): void {
    const run = this.runner
      .run(begun.episode, begun.grant, { resumed })
      .finally(() => {
        this.runs.delete(run);
        this.release(actor);
      });
    this.runs.add(run);
  }

  private release(actor: RegisteredActor): void {
    this.slotsOf(actor.id).running--;
    this.pump(actor);
  }

  /** Starts queued episodes while slots are free. */
  private pump(actor: RegisteredActor): void {
    const slots = this.slotsOf(actor.id);
    while (slots.running < actor.options.maxConcurrentEpisodes && slots.queue.length > 0) {
      const id = slots.queue.shift() as string;
      slots.running++;
      this.runner.beginQueued(id).then(
        (begun) => (begun.status === 'started' ? this.launch(actor, begun) : this.release(actor)),
        (error: unknown) => {
          this.logger.error(`could not start queued episode ${id}: ${String(error)}`);
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
      this.unsubscribes.push(this.bus.subscribe(trigger.event, (event) => this.onEvent(expectation, event)));
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

  private async safeDispatch(expectation: RegisteredExpectation, trigger: EpisodeTrigger, dedupeKey: string): Promise<void> {
    try {
      await this.dispatch(expectation, trigger, {
        dedupeKey,
        sourceStack: this.options.stackSlug,
        sourceEnv: this.options.env,
        jitter: true,
      });
    } catch (error) {
      this.logger.error(`trigger of ${expectation.actorId}.${expectation.id} failed: ${String(error)}`);
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
