import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { BusEvent } from '../bus/bus.interface.js';
import type { EventReceipt } from '../bus/durable-subscriptions.interface.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import {
  errorCode,
  errorMessage,
  holdsWork,
  isDatabaseUnavailable,
} from '../sql/database-errors.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Dispatcher } from '../dispatch/dispatcher.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { eventKey, scheduleKey } from './dedupe-keys.js';
import { DrainHandovers } from './drain-handovers.js';
import { EventWindows, databaseNow, type AskHistory } from './event-windows.js';
import { StaleEventError } from './stale-event.error.js';
import { EventSubscriptions } from './event-subscriptions.js';
import { CooldownHistory, type CooldownCoverage as Coverage } from './cooldown-history.js';
import { busChannel } from '../bus/bus-channel.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import { matchesFilter, readPath } from '../actors/trigger-filter.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { TimerTriggers } from './timer-triggers.js';
import { catchUpSchedule, type FireBucket } from './schedule-catch-up.js';
import { missedBuckets, type Schedule } from './schedule-buckets.js';
import type { CatchUp } from '../actors/expectation.decorator.js';
import { TriggerPlacement } from './trigger-placement.service.js';

const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 5_000;

/**
 * Why a trigger waits: the database is away, or it refused the statement for a reason of the
 * moment.
 */
function heldBy(error: unknown): string {
  if (isDatabaseUnavailable(error)) return `is waiting for the database (${errorMessage(error)})`;
  return (
    `was refused by the database (SQLSTATE ${errorCode(error)}: ${errorMessage(error)}), ` +
    `not for its own data`
  );
}

function describeTrigger(trigger: EpisodeTrigger): string {
  if (trigger.type === 'event') return `event ${trigger.eventId} "${trigger.eventType}"`;
  if (trigger.type === 'schedule') return `schedule ${trigger.scheduledAt}`;
  return trigger.type;
}

/**
 * Turns what happens into triggers: bus events (filtered, debounced and cooled down per subject),
 * wall-clock buckets and cron ticks, each with the deterministic dedupe key every node computes
 * alike. Every node does this for every trigger; for bus events one node dispatches and the rest
 * stand by (TriggerPlacement), for timers every node tries; the unique index lets one insert
 * through. Each event-triggered expectation is a durable consumer of the bus: an event counts as
 * handled (and its position moves past it) only once its trigger settled, so a trigger this node
 * drops by stopping (a debounce pending, a retry through an outage) is read again by the next node,
 * or by this one after its restart.
 */
@Injectable()
export class TriggerSources implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumDispatch');
  /** The schedules this node's timers fire, for the testing kit's clock (fireSchedulesBetween). */
  private readonly schedules = new Map<RegisteredExpectation, Schedule>();
  private readonly timers = new TimerTriggers((expectation, bucket) =>
    this.fireSchedule(expectation, bucket),
  );
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
    this.handovers = new DrainHandovers(store, dispatcher, this.logger, {
      sourceStack: options.stackSlug,
      sourceEnv: options.env,
    });
    this.subscriptions = new EventSubscriptions(events, mode, this.logger);
    const scope = {
      stack: options.stackSlug,
      env: options.env,
      channel: busChannel(options.stackSlug, options.env),
    };
    this.history = new CooldownHistory(database.sql, scope, this.logger, () => this.on);
  }

  /**
   * Every mode runs the triggers (the dispatcher decides what they lead to), so a node can switch
   * mode at runtime.
   */
  onApplicationBootstrap(): void {
    this.on = true;
    this.placement.start();
    for (const actor of this.registry.all()) {
      for (const expectation of actor.expectations.values()) this.start(actor, expectation);
    }
    this.subscriptions.start();
    if (!this.events.replays && this.subscriptions.size > 0) {
      this.logger.warn(
        'the configured bus cannot replay (it does not implement DurableSubscriptions): an event ' +
          'published while ' +
          "no node hosting its actor reads the bus never becomes an episode. Use bus: 'postgres' " +
          'for that guarantee.',
      );
    }
  }

  /**
   * Stops every trigger source: subscriptions, interval timers, cron jobs, pending debounces and
   * cooldowns.
   */
  async stop(): Promise<void> {
    this.on = false;
    this.placement.stop();
    // The released backups turn into handovers within this tick's microtasks.
    await new Promise((resolve) => setImmediate(resolve));
    await this.handovers.handOverAll();
    this.subscriptions.stop();
    // Their events stay unsettled: the next reader of the bus (a peer, or this node after its
    // restart) fires them.
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
      // Each subscription (a boot, or the actor enabled again) covers what it reads from then on: a
      // window opened before a pause missed the events published during it, so it is dropped, and a
      // fire of the ended subscription still on its way (a backup's delay, a retry) fires nothing.
      this.subscriptions.add(actor.id, consumer, trigger.event, (live) => {
        this.windows.clear(subjectPrefix(expectation));
        const coverage = this.history.coverage(expectation);
        return (event, receipt) => this.onEvent(expectation, event, receipt, coverage, live);
      });
    } else if (trigger.every !== undefined) {
      this.timers.every(expectation, expectation.intervalMs as number);
      this.schedules.set(expectation, { intervalMs: expectation.intervalMs as number });
      this.catchUp(expectation, { intervalMs: expectation.intervalMs as number }, trigger.catchUp);
    } else if (trigger.cron !== undefined) {
      this.schedules.set(expectation, { cron: trigger.cron });
      this.timers.cron(
        `cyclium:${actor.id}:${expectation.id}`,
        expectation,
        trigger.cron,
        this.schedulerRegistry(true),
      );
      this.catchUp(expectation, { cron: trigger.cron }, trigger.catchUp);
    }
  }

  /**
   * Makes up for the buckets that fell while no node ran the schedule, as declared (see
   * catchUpSchedule).
   */
  private catchUp(
    expectation: RegisteredExpectation,
    schedule: Schedule,
    catchUp: CatchUp = 'none',
  ): void {
    if (catchUp === 'none') return;
    const { env, retention } = this.options;
    const scope = { sql: this.database.sql, env, logger: this.logger, retention };
    const fire: FireBucket = (e, bucket, insertBefore) => this.fireBucket(e, bucket, insertBefore);
    const what = `${expectation.actorId}.${expectation.id}`;
    catchUpSchedule(scope, expectation, schedule, catchUp, fire).catch((error: unknown) =>
      this.logger.warn(`catch-up of ${what} dropped: ${errorMessage(error)}`),
    );
  }

  /**
   * Fires every bucket of this node's schedules after `from` and up to `to` (ms), as the timers
   * would have had the wall clock passed them, oldest first; resolves with how many were fired. The
   * testing kit's `clock.advance` calls it: production code never moves the clock.
   */
  async fireSchedulesBetween(from: number, to: number): Promise<number> {
    let fired = 0;
    for (const [expectation, schedule] of this.schedules) {
      const { buckets } = missedBuckets(schedule, 'all', new Date(from), to);
      for (const bucket of buckets) {
        if (bucket.getTime() <= from) continue;
        await this.fireBucket(expectation, bucket);
        fired++;
      }
    }
    return fired;
  }

  /** Settles once the event's trigger has (see EventWindows); filtered out, it settles at once. */
  private onEvent(
    expectation: RegisteredExpectation,
    event: BusEvent,
    receipt: EventReceipt,
    coverage: Coverage,
    live: () => boolean,
  ) {
    coverage.read(receipt);
    const trigger = expectation.options.trigger as {
      event: string;
      filter?: Parameters<typeof matchesFilter>[0];
    };
    if (!matchesFilter(trigger.filter, event.payload)) return Promise.resolve();
    const { subjectKey, debounceMs = 0, cooldownMs = 0 } = expectation.options;
    const subjectValue = subjectKey ? String(readPath(event.payload, subjectKey)) : '';
    const subject = `${subjectPrefix(expectation)}${subjectValue}`;
    const history: AskHistory = (key, asking, read) =>
      coverage.ask(key, asking, read, cooldownMs, debounceMs);
    const readThrough = () => this.events.readThrough();
    return this.windows.admit(
      subject,
      event,
      receipt,
      { debounceMs, cooldownMs, history, readThrough },
      (fired, firedReceipt) => this.fireEvent(expectation, fired, firedReceipt, live),
    );
  }

  /**
   * Exactly one episode per event, whatever the stop and the windows: an episode is archived (its
   * dedupe key freed) no sooner than `retention.archiveAfter` after it ended, so after it started,
   * which is never before its event was stored plus the expectation's debounce (a window fires
   * then, by the committed clock, on every node). An event younger than both cannot meet a freed
   * key; an older one could (a replay from a position that lagged, a window's trailing event read
   * late), so it is skipped, with the reason (StaleEventError). The insert itself is bounded the
   * same way (`insertBefore`, by the database clock), for a trigger that waits on after this
   * check: for a slot, through an outage, or handed over by a drain.
   */
  private fireEvent(
    expectation: RegisteredExpectation,
    event: BusEvent,
    receipt: EventReceipt,
    live: () => boolean,
  ): Promise<boolean> {
    if (!live()) return Promise.resolve(false);
    const archiveAfter = this.options.retention?.archiveAfter;
    const windowMs =
      archiveAfter === undefined ? undefined : archiveAfter + (expectation.options.debounceMs ?? 0);
    const insertBefore =
      windowMs === undefined ? undefined : new Date(receipt.committedAt + windowMs);
    const ageMs = databaseNow(receipt) - receipt.committedAt;
    if (windowMs !== undefined && ageMs >= windowMs)
      return Promise.reject(new StaleEventError(ageMs, windowMs));
    const key = eventKey(
      expectation.actorId,
      expectation.id,
      event.type,
      event.eventId,
      event.payload,
    );
    return this.trigger(
      expectation,
      {
        type: 'event',
        eventType: event.type,
        eventId: event.eventId,
        payload: event.payload,
        ...(event.traceContext === undefined ? {} : { traceContext: event.traceContext }),
      },
      scopeKey(key, this.options.env),
      true,
      event.publishedAt,
      insertBefore,
      live,
    );
  }

  /**
   * A timer's bucket. No node starts a bucket's episode before the bucket's time (timers fire at
   * it, a catch-up after it), so its key is held until at least `archiveAfter` past that time; a
   * timer that fires later than that (a stalled process, a trigger retrying through a long outage)
   * could meet the key freed by the bucket's archived episode, so its insert is bounded there, by
   * the database clock, and refused past it as a duplicate.
   */
  private fireSchedule(expectation: RegisteredExpectation, bucket: Date): void {
    const archiveAfter = this.options.retention?.archiveAfter;
    const insertBefore =
      archiveAfter === undefined ? undefined : new Date(bucket.getTime() + archiveAfter);
    this.fireBucket(expectation, bucket, insertBefore).catch((error: unknown) =>
      this.logger.warn(
        `trigger of ${expectation.actorId}.${expectation.id} (schedule ${bucket.toISOString()}) ` +
          `dropped: ${errorMessage(error)}`,
      ),
    );
  }

  private fireBucket(
    expectation: RegisteredExpectation,
    bucket: Date,
    insertBefore?: Date,
  ): Promise<boolean> {
    const trigger: EpisodeTrigger = {
      type: 'schedule',
      payload: {},
      scheduledAt: bucket.toISOString(),
    };
    const key = scopeKey(
      scheduleKey(expectation.actorId, expectation.id, bucket),
      this.options.env,
    );
    return this.trigger(expectation, trigger, key, false, undefined, insertBefore);
  }

  /**
   * A bus event (`placed`) goes through TriggerPlacement: the node ranked first dispatches at once,
   * the others only as backups. A timer, which fires on every node anyway, races instead, after a
   * random 0–jitterMs so the fastest node does not win every key. A trigger that meets a database
   * error other than its own data's fault (an outage, a timeout, a serialization failure, a
   * deadlock, a read-only or full server: see holdsWork) is retried with backoff until it lands or
   * the node drains. Resolves true once the trigger is settled (an episode or a trigger request
   * exists for it, here or elsewhere, or it needs none); false when this node stopped first (the
   * bus's next reader fires it again); rejects for a reason of the trigger's own (a skip).
   */
  private async trigger(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    dedupeKey: string,
    placed = false,
    publishedAt?: string,
    insertBefore?: Date,
    /** False once the subscription that read the event ended: its fire is the next reader's. */
    live: () => boolean = () => true,
  ): Promise<boolean> {
    const what =
      `trigger of ${expectation.actorId}.${expectation.id} ` + `(${describeTrigger(trigger)})`;
    const turn = placed ? await this.placement.turn(dedupeKey, expectation.actorId) : 'race';
    if (turn === 'handover')
      return this.handovers.add({ expectation, trigger, dedupeKey, what, insertBefore });
    if (turn === 'handled') return true;
    if (!this.on || !live()) return false;
    if (turn === 'backup')
      this.logger.debug(
        `${what}: no node signaled it within this node's backup delay; dispatching here`,
      );
    if (turn === 'race' && this.options.jitterMs > 0)
      await new Promise((resolve) => setTimeout(resolve, Math.random() * this.options.jitterMs));
    for (let attempt = 0, delay = RETRY_FIRST_MS; this.on && live(); attempt++) {
      try {
        const result = await this.dispatcher.dispatch(expectation, trigger, {
          dedupeKey,
          sourceStack: this.options.stackSlug,
          sourceEnv: this.options.env,
          waitForSlot: placed,
          onWait: placed
            ? (withdraw) => this.placement.waitingHere(dedupeKey, expectation.actorId, withdraw)
            : undefined,
          insertBefore,
        });
        if (placed) this.placement.dispatched(dedupeKey, result);
        if (result.status === 'started' && publishedAt !== undefined)
          this.triggered(expectation, trigger, publishedAt);
        if (result.status === 'disabled') {
          this.logger.debug(`${what} fired nothing: the actor is disabled on this node`);
          return false;
        }
        // Busy because this node began to drain: nobody took it.
        return result.status !== 'busy' || this.on;
      } catch (error) {
        // Rule 13: only the trigger's own data may skip it; any other database error holds its
        // position.
        if (!holdsWork(error)) throw error;
        if (attempt === 0) this.logger.warn(`${what} ${heldBy(error)}; retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
    }
    this.logger.log(
      `${what} left for the bus's next reader: this node stopped, or the actor was disabled ` +
        `here, while the database error lasted`,
    );
    return false;
  }

  private triggered(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    publishedAt: string,
  ): void {
    if (!this.telemetry.wants('episode.triggered')) return;
    const latencyMs = Date.now() - Date.parse(publishedAt);
    if (!Number.isFinite(latencyMs)) return;
    this.telemetry.emit('episode.triggered', {
      actorId: expectation.actorId,
      expectationId: expectation.id,
      eventType: trigger.eventType ?? '',
      latencyMs,
    });
  }

  private schedulerRegistry(required: boolean): SchedulerRegistry | undefined {
    try {
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      if (!required) return undefined;
      throw new ActorDefinitionError(
        'cron triggers need ScheduleModule.forRoot() imported once in the app',
      );
    }
  }
}

/** The start of every subject key of `expectation` in EventWindows. */
function subjectPrefix(expectation: RegisteredExpectation): string {
  return `${expectation.actorId}\u0000${expectation.id}\u0000`;
}
