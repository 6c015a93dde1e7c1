import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { BusEvent } from '../bus/bus.interface.js';
import type { EventReceipt } from '../bus/durable-subscriptions.interface.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage, isDatabaseUnavailable } from '../sql/database-errors.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Dispatcher } from '../dispatch/dispatcher.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { eventKey, scheduleKey } from './dedupe-keys.js';
import { DrainHandovers } from './drain-handovers.js';
import { EventSubscriptions } from './event-subscriptions.js';
import { EventWindows, type AskHistory } from './event-windows.js';
import { CooldownHistory, type CooldownCoverage as Coverage } from './cooldown-history.js';
import { busChannel } from '../bus/bus-channel.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import { matchesFilter, readPath } from '../actors/trigger-filter.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { TimerTriggers } from './timer-triggers.js';
import { catchUpSchedule } from './schedule-catch-up.js';
import type { Schedule } from './schedule-buckets.js';
import type { CatchUp } from '../actors/expectation.decorator.js';
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
 * Each event-triggered expectation is a durable consumer of the bus: an event counts as handled
 * (and its position moves past it) only once its trigger settled, so a trigger this node drops by
 * stopping (a debounce pending, a retry through an outage) is read again by the next node, or by
 * this one after its restart.
 */
@Injectable()
export class TriggerSources implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumDispatch');
  private readonly timers = new TimerTriggers((expectation, bucket) => this.fireSchedule(expectation, bucket));
  private readonly windows = new EventWindows();
  private readonly handovers: DrainHandovers;
  private readonly subscriptions: EventSubscriptions;
  private readonly history: CooldownHistory;
  private on = false;

  constructor(
    private readonly registry: ActorRegistry,
    private readonly dispatcher: Dispatcher,
    private readonly placement: TriggerPlacement,
    private readonly events: EventOutbox,
    store: EpisodeStore,
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
    private readonly telemetry: CycliumTelemetry,
    private readonly database: CycliumDataSource,
    mode: Mode,
  ) {
    this.handovers = new DrainHandovers(store, dispatcher, this.logger, { sourceStack: options.stackSlug, sourceEnv: options.env });
    this.subscriptions = new EventSubscriptions(events, mode, this.logger);
    const scope = { stack: options.stackSlug, env: options.env, channel: busChannel(options.stackSlug, options.env) };
    this.history = new CooldownHistory(database.sql, scope, this.logger, () => this.on);
  }

  /** Every mode runs the triggers (the dispatcher decides what they lead to), so a node can switch mode at runtime. */
  onApplicationBootstrap(): void {
    this.on = true;
    this.placement.start();
    for (const actor of this.registry.all()) {
      for (const expectation of actor.expectations.values()) this.start(actor, expectation);
    }
    this.subscriptions.start();
    if (!this.events.replays && this.subscriptions.size > 0) {
      this.logger.warn(
        'the configured bus cannot replay (it does not implement DurableSubscriptions): an event published while ' +
          "no node hosting its actor reads the bus never becomes an episode. Use bus: 'postgres' for that guarantee.",
      );
    }
  }

  /** Stops every trigger source: subscriptions, interval timers, cron jobs, pending debounces and cooldowns. */
  async stop(): Promise<void> {
    this.on = false;
    this.placement.stop();
    // The released backups turn into handovers within this tick's microtasks.
    await new Promise((resolve) => setImmediate(resolve));
    await this.handovers.handOverAll();
    this.subscriptions.stop();
    // Their events stay unsettled: the next reader of the bus (a peer, or this node after its restart) fires them.
    this.windows.clear();
    await this.timers.stop(this.schedulerRegistry(false));
  }

  /** Subjects cooling down now (memory stays bounded by the subjects seen within `cooldownMs`). */
  get coolingDown(): number {
    return this.windows.coolingDown;
  }

  private start(actor: RegisteredActor, expectation: RegisteredExpectation): void {
    const trigger = expectation.options.trigger;
    if (trigger === 'manual' || trigger === 'workflow') return;
    if (trigger.event !== undefined) {
      const consumer = `${actor.id}.${expectation.id}`;
      // Each subscription (a boot, or the actor enabled again) covers what it reads from then on.
      this.subscriptions.add(actor.id, consumer, trigger.event, () => {
        const coverage = this.history.coverage(expectation);
        return (event, receipt) => this.onEvent(expectation, event, receipt, coverage);
      });
    } else if (trigger.every !== undefined) {
      this.timers.every(expectation, expectation.intervalMs as number);
      this.catchUp(expectation, { intervalMs: expectation.intervalMs as number }, trigger.catchUp);
    } else if (trigger.cron !== undefined) {
      this.timers.cron(`cyclium:${actor.id}:${expectation.id}`, expectation, trigger.cron, this.schedulerRegistry(true));
      this.catchUp(expectation, { cron: trigger.cron }, trigger.catchUp);
    }
  }

  /** Makes up for the buckets that fell while no node ran the schedule, as declared (see catchUpSchedule). */
  private catchUp(expectation: RegisteredExpectation, schedule: Schedule, catchUp: CatchUp = 'none'): void {
    if (catchUp === 'none') return;
    catchUpSchedule(this.database.sql, this.options.env, this.logger, expectation, schedule, catchUp, (e, bucket) => this.fireBucket(e, bucket)).catch(
      (error: unknown) => this.logger.warn(`catch-up of ${expectation.actorId}.${expectation.id} dropped: ${errorMessage(error)}`),
    );
  }

  /** Settles once the event's trigger has (see EventWindows); filtered out, it settles at once. */
  private onEvent(expectation: RegisteredExpectation, event: BusEvent, receipt: EventReceipt, coverage: Coverage) {
    coverage.read(receipt);
    const trigger = expectation.options.trigger as { event: string; filter?: Parameters<typeof matchesFilter>[0] };
    if (!matchesFilter(trigger.filter, event.payload)) return Promise.resolve();
    const { subjectKey, debounceMs = 0, cooldownMs = 0 } = expectation.options;
    const subject = `${expectation.actorId}\u0000${expectation.id}\u0000${subjectKey ? String(readPath(event.payload, subjectKey)) : ''}`;
    const history: AskHistory = (key, asking, read) => coverage.ask(key, asking, read, cooldownMs, debounceMs);
    return this.windows.admit(subject, event, receipt, { debounceMs, cooldownMs, history }, (fired) =>
      this.trigger(
        expectation,
        { type: 'event', eventType: fired.type, eventId: fired.eventId, payload: fired.payload },
        scopeKey(eventKey(expectation.actorId, expectation.id, fired.type, fired.eventId, fired.payload), this.options.env),
        true,
        fired.publishedAt,
      ),
    );
  }

  private fireSchedule(expectation: RegisteredExpectation, bucket: Date): void {
    this.fireBucket(expectation, bucket).catch((error: unknown) =>
      this.logger.warn(`trigger of ${expectation.actorId}.${expectation.id} (schedule ${bucket.toISOString()}) dropped: ${errorMessage(error)}`),
    );
  }

  private fireBucket(expectation: RegisteredExpectation, bucket: Date): Promise<boolean> {
    const trigger: EpisodeTrigger = { type: 'schedule', payload: {}, scheduledAt: bucket.toISOString() };
    return this.trigger(expectation, trigger, scopeKey(scheduleKey(expectation.actorId, expectation.id, bucket), this.options.env));
  }

  /**
   * A bus event (`placed`) goes through TriggerPlacement: the node ranked first dispatches at once,
   * the others only as backups. A timer, which fires on every node anyway, races instead, after a
   * random 0–jitterMs so the fastest node does not win every key. A trigger that meets an
   * unreachable database is retried with backoff until it lands or the node drains. Resolves true
   * once the trigger is settled (an episode or a trigger request exists for it, here or elsewhere,
   * or it needs none); false when this node stopped first (the bus's next reader fires it again);
   * rejects for a reason of the trigger's own.
   */
  private async trigger(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    dedupeKey: string,
    placed = false,
    publishedAt?: string,
  ): Promise<boolean> {
    const what = `trigger of ${expectation.actorId}.${expectation.id} (${describeTrigger(trigger)})`;
    const turn = placed ? await this.placement.turn(dedupeKey, expectation.actorId) : 'race';
    if (turn === 'handover') return this.handovers.add(expectation, trigger, dedupeKey, what);
    if (turn === 'handled') return true;
    if (!this.on) return false;
    if (turn === 'backup') this.logger.debug(`${what}: no node signaled it within this node's backup delay; dispatching here`);
    if (turn === 'race' && this.options.jitterMs > 0) await new Promise((resolve) => setTimeout(resolve, Math.random() * this.options.jitterMs));
    for (let attempt = 0, delay = RETRY_FIRST_MS; this.on; attempt++) {
      try {
        const result = await this.dispatcher.dispatch(expectation, trigger, {
          dedupeKey,
          sourceStack: this.options.stackSlug,
          sourceEnv: this.options.env,
          waitForSlot: placed,
          onWait: placed ? (withdraw) => this.placement.waitingHere(dedupeKey, expectation.actorId, withdraw) : undefined,
        });
        if (placed) this.placement.dispatched(dedupeKey, result);
        if (result.status === 'started' && publishedAt !== undefined) this.triggered(expectation, trigger, publishedAt);
        if (result.status === 'disabled') {
          this.logger.debug(`${what} fired nothing: the actor is disabled on this node`);
          return false;
        }
        // Busy because this node began to drain: nobody took it.
        return result.status !== 'busy' || this.on;
      } catch (error) {
        if (!isDatabaseUnavailable(error)) throw error;
        if (attempt === 0) this.logger.warn(`${what} is waiting for the database (${errorMessage(error)}); retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
    }
    this.logger.log(`${what} left for the bus's next reader: this node stopped while the database was away`);
    return false;
  }

  private triggered(expectation: RegisteredExpectation, trigger: EpisodeTrigger, publishedAt: string): void {
    if (!this.telemetry.wants('episode.triggered')) return;
    const latencyMs = Date.now() - Date.parse(publishedAt);
    if (!Number.isFinite(latencyMs)) return;
    this.telemetry.emit('episode.triggered', { actorId: expectation.actorId, expectationId: expectation.id, eventType: trigger.eventType ?? '', latencyMs });
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
