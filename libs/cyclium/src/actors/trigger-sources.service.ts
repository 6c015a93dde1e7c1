import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { CronJob } from 'cron';
import type { BusEvent } from '../bus/bus.interface.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage, isDatabaseUnavailable } from '../database/database-errors.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import { ActorDefinitionError } from './actor-definition.error.js';
import { ActorRegistry } from './actor-registry.service.js';
import { Dispatcher } from '../dispatch/dispatcher.service.js';
import { eventKey, scheduleKey } from './dedupe-keys.js';
import { bucketStart } from './interval.js';
import type { RegisteredActor, RegisteredExpectation } from './registered-actor.js';
import { matchesFilter, readPath } from './trigger-filter.js';
import { TriggerPlacement } from './trigger-placement.service.js';

const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 5_000;

function describeTrigger(trigger: EpisodeTrigger): string {
  if (trigger.type === 'event') return `event ${trigger.eventId} "${trigger.eventType}"`;
  if (trigger.type === 'schedule') return `schedule ${trigger.scheduledAt}`;
  return trigger.type;
}

/**
 * Turns what happens into triggers: bus events (filtered, debounced and cooled down per subject),
 * wall-clock buckets and cron ticks, each with the deterministic dedupe key every node computes
 * alike. Every node does this for every trigger; for bus events one node dispatches and the rest
 * stand by (TriggerPlacement), for timers every node tries; the unique index lets one insert through.
 */
@Injectable()
export class TriggerSources implements OnApplicationBootstrap {
  private readonly logger = new Logger('ActorHost');
  private readonly unsubscribes: Array<() => void> = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly cronJobs: Array<{ name: string; job: CronJob }> = [];
  private readonly debounces = new Map<string, NodeJS.Timeout>();
  /** Per subject, until when its triggers are ignored; each entry deletes itself when it lapses. */
  private readonly cooldownUntil = new Map<string, number>();
  private readonly handovers: Array<{ expectation: RegisteredExpectation; trigger: EpisodeTrigger; dedupeKey: string; what: string }> = [];
  private on = false;

  constructor(
    private readonly registry: ActorRegistry,
    private readonly dispatcher: Dispatcher,
    private readonly placement: TriggerPlacement,
    private readonly events: EventOutbox,
    private readonly store: EpisodeStore,
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Every mode runs the triggers (the dispatcher decides what they lead to), so a node can switch mode at runtime. */
  onApplicationBootstrap(): void {
    this.on = true;
    this.placement.start();
    for (const actor of this.registry.all()) {
      for (const expectation of actor.expectations.values()) this.start(actor, expectation);
    }
  }

  /** Stops every trigger source: subscriptions, interval timers, cron jobs, pending debounces and cooldowns. */
  async stop(): Promise<void> {
    this.on = false;
    this.placement.stop();
    // The released backups turn into handovers within this tick's microtasks.
    await new Promise((resolve) => setImmediate(resolve));
    await this.handOverAll();
    this.unsubscribes.splice(0).forEach((off) => off());
    for (const timer of [...this.timers, ...this.debounces.values()]) clearTimeout(timer);
    this.timers.clear();
    this.debounces.clear();
    this.cooldownUntil.clear();
    const registry = this.schedulerRegistry(false);
    for (const { name, job } of this.cronJobs.splice(0)) {
      await job.stop();
      if (registry?.doesExist('cron', name)) registry.deleteCronJob(name);
    }
  }

  /** Subjects cooling down now (memory stays bounded by the subjects seen within `cooldownMs`). */
  get coolingDown(): number {
    return this.cooldownUntil.size;
  }

  private start(actor: RegisteredActor, expectation: RegisteredExpectation): void {
    const trigger = expectation.options.trigger;
    if (trigger === 'manual' || trigger === 'workflow') return;
    if (trigger.event !== undefined) {
      this.unsubscribes.push(this.events.subscribe(trigger.event, (event) => this.onEvent(expectation, event)));
    } else if (trigger.every !== undefined) {
      this.scheduleEvery(expectation, expectation.intervalMs as number);
    } else if (trigger.cron !== undefined) {
      this.scheduleCron(actor, expectation, trigger.cron);
    }
  }

  private onEvent(expectation: RegisteredExpectation, event: BusEvent): void {
    const trigger = expectation.options.trigger as { event: string; filter?: Parameters<typeof matchesFilter>[0] };
    if (!matchesFilter(trigger.filter, event.payload)) return;
    const { subjectKey, debounceMs, cooldownMs } = expectation.options;
    const subject = `${expectation.actorId}\u0000${expectation.id}\u0000${subjectKey ? String(readPath(event.payload, subjectKey)) : ''}`;
    if (this.cooldownUntil.has(subject)) return;
    const fire = () => {
      this.debounces.delete(subject);
      if (!this.on) return;
      if (cooldownMs) this.coolDown(subject, cooldownMs);
      void this.trigger(
        expectation,
        { type: 'event', eventType: event.type, eventId: event.eventId, payload: event.payload },
        scopeKey(eventKey(expectation.actorId, expectation.id, event.type, event.eventId, event.payload), this.options.env),
        true,
      );
    };
    if (!debounceMs) return fire();
    // Trailing edge: every event for the subject restarts its quiet period; the last one runs.
    clearTimeout(this.debounces.get(subject));
    this.debounces.set(subject, setTimeout(fire, debounceMs));
  }

  private coolDown(subject: string, cooldownMs: number): void {
    const until = Date.now() + cooldownMs;
    this.cooldownUntil.set(subject, until);
    setTimeout(() => {
      if (this.cooldownUntil.get(subject) === until) this.cooldownUntil.delete(subject);
    }, cooldownMs).unref();
  }

  /** Fires at the start of each wall-clock bucket, so every node computes the same bucket and key. */
  private scheduleEvery(expectation: RegisteredExpectation, intervalMs: number): void {
    const now = Date.now();
    const next = bucketStart(now, intervalMs) + intervalMs;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.on) return;
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
      // The tick to the minute: nodes whose timers fire a few ms apart agree on the bucket.
      onTick: () => this.fireSchedule(expectation, new Date(bucketStart(Date.now(), 60_000))),
    });
    this.schedulerRegistry(true)?.addCronJob(name, job);
    this.cronJobs.push({ name, job });
  }

  private fireSchedule(expectation: RegisteredExpectation, bucket: Date): void {
    void this.trigger(
      expectation,
      { type: 'schedule', payload: {}, scheduledAt: bucket.toISOString() },
      scopeKey(scheduleKey(expectation.actorId, expectation.id, bucket), this.options.env),
    );
  }

  /**
   * A bus event (`placed`) goes through TriggerPlacement: the node ranked first dispatches at once,
   * the others only as backups. A timer, which fires on every node anyway, races instead, after a
   * random 0–jitterMs so the fastest node does not win every key. A trigger that meets an
   * unreachable database is retried with backoff until it lands or the node drains: if every node
   * dropped it during an outage, an acknowledged event would never become an episode. Any other
   * failure drops it, with the reason and the event id logged.
   */
  private async trigger(expectation: RegisteredExpectation, trigger: EpisodeTrigger, dedupeKey: string, placed = false): Promise<void> {
    const what = `trigger of ${expectation.actorId}.${expectation.id} (${describeTrigger(trigger)})`;
    const turn = placed ? await this.placement.turn(dedupeKey, expectation.actorId) : 'race';
    if (turn === 'handover') return this.handOver(expectation, trigger, dedupeKey, what);
    if (turn === 'handled' || !this.on) return;
    if (turn === 'backup') this.logger.debug(`${what}: no node signaled it within this node's backup delay; dispatching here`);
    if (turn === 'race' && this.options.jitterMs > 0) await new Promise((resolve) => setTimeout(resolve, Math.random() * this.options.jitterMs));
    for (let attempt = 0, delay = RETRY_FIRST_MS; this.on; attempt++) {
      try {
        const result = await this.dispatcher.dispatch(expectation, trigger, { dedupeKey, sourceStack: this.options.stackSlug, sourceEnv: this.options.env });
        if (placed) this.placement.dispatched(dedupeKey, result);
        if (result.status === 'disabled') this.logger.debug(`${what} fired nothing: the actor is disabled on this node`);
        return;
      } catch (error) {
        if (!isDatabaseUnavailable(error)) {
          this.logger.warn(`${what} dropped: ${errorMessage(error)}`);
          return;
        }
        if (attempt === 0) this.logger.warn(`${what} is waiting for the database (${errorMessage(error)}); retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
    }
  }

  /**
   * Collected, so the drain hands them over together: once this node stops, nobody else may
   * remember that these triggers still lack their episodes. Most have one by now (the first
   * node's signal was on its way), so one statement finds those and only the rest are deferred.
   */
  private handOver(expectation: RegisteredExpectation, trigger: EpisodeTrigger, dedupeKey: string, what: string): void {
    this.handovers.push({ expectation, trigger, dedupeKey, what });
  }

  private async handOverAll(): Promise<void> {
    const pending = this.handovers.splice(0);
    if (pending.length === 0) return;
    let held: Set<string>;
    try {
      held = await this.store.heldDedupeKeys(pending.map((p) => p.dedupeKey));
    } catch (error) {
      this.logger.warn(`could not check ${pending.length} trigger(s) this node stood by for; handing each over: ${errorMessage(error)}`);
      held = new Set();
    }
    const options = { sourceStack: this.options.stackSlug, sourceEnv: this.options.env };
    await Promise.all(
      pending
        .filter((p) => !held.has(p.dedupeKey))
        .map(({ expectation, trigger, dedupeKey, what }) =>
          this.dispatcher.handOver(expectation, trigger, { ...options, dedupeKey }).then(
            (result) => void this.logger.log(`${what}: handed to the cluster while draining (${result.status})`),
            (error: unknown) => this.logger.warn(`${what} could not be handed over while draining, and is lost: ${errorMessage(error)}`),
          ),
        ),
    );
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
