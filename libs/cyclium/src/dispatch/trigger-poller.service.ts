import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorSlots } from './actor-slots.service.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { SpacedTrigger } from '../primitives/spaced-trigger.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { OutageLog, errorMessage } from '../sql/database-errors.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { isLimited } from '../episodes/flow-limits.js';
import { FlowPump, episodeFlow } from './flow-pump.js';
import { PollQuiet } from './poll-quiet.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { episodeLabel } from '../episodes/episode-log-lines.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { DeferredRunner, REQUEST_WAKE_EVENT } from './deferred-runner.service.js';
import { Mode } from './mode.service.js';
import type { CycliumTriggerRequest } from '../entities/trigger-request.entity.js';
import { TriggerRequests, requestClaimKey } from './trigger-requests.service.js';
import { claimKeyOf } from '../claims/claim-keys.js';

const BATCH = 100;
/**
 * A poll reads this many due requests per free slot and starts a random choice of them: nodes
 * polling at once (each freed slot of a backlog polls) mostly reach for different rows, where the
 * oldest alone would have each loser wait for the winner's transaction and find it taken.
 */
const SPREAD = 4;

/** `items` in a random order (Fisher–Yates), in place. */
function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

const INTERVAL_NAME = 'cyclium:trigger-poller';

/** Rolls a take back (the claims it took included) when the episode's own claim is busy. */
class EpisodeClaimBusy extends Error {
  override readonly name = 'EpisodeClaimBusy';
}

/**
 * Rolls a take back when the request and the episode row it returned do not verify together
 * (`integrity`).
 */
class TamperedTake extends Error {
  override readonly name = 'TamperedTake';

  constructor(readonly episode: EpisodeRow) {
    super(`trigger request for episode ${episode.id} does not verify`);
  }
}

type Started = {
  episode: EpisodeRow;
  grant: AcquireResult;
  resumed: boolean;
  takenOver: boolean;
} | null;

/**
 * On full nodes: runs what trigger-only nodes deferred, and runs for later once due. Every
 * `triggerPollIntervalMs` (through the app's SchedulerRegistry; an idle poller lets ticks pass up
 * to `triggerPollIdleIntervalMs`, see PollQuiet), at once when a deferring node's
 * wake-up arrives over the bus, and, while due requests remain that a poll left for want of slots,
 * each time one of those slots frees, it reads due requests oldest first — its env strictly
 * (`triggerPollSourceEnv`), one stack or every one (`triggerPollSourceStack`), only expectations it
 * hosts of actors it runs in full mode, a few per free slot, of which it starts a random choice, no
 * more than its free slots — and takes each in one transaction: the work claim
 * `trigger_request:<id>`, the conditional `UPDATE … WHERE status = 'pending'`, the episode moved
 * from deferred to running here with its own claim. So a request is either still pending or done
 * with; a node killed after it took some leaves running episodes, which recovery restarts like any
 * other. Requests to run now pending longer than `triggerRequestTtlMs` while a full node of their
 * env was up expire (accepted work has a due time and waits for a node that hosts it, however
 * long), and their episodes fail with the reason: on every node that is not disabled, whatever it
 * hosts. The mode is read at every tick, per actor: an actor switched away from full is taken for
 * nothing until it is switched back, and the switch back polls at once.
 */
@Injectable()
export class TriggerPoller implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumDispatch');
  private readonly outage = new OutageLog(this.logger, 'trigger request poll');
  private readonly polls = new SpacedTrigger(() => this.poll(), 0, 1);
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private lastExpiry = Number.NEGATIVE_INFINITY;
  /**
   * Actors with requests due that the last poll of them left (more than their free slots): a slot
   * of one that frees polls again at once, so a backlog drains as fast as its slots free rather
   * than one batch per poll interval. Polls never overlap, and the slots that free during one are
   * served by the next together, so a busy node polls about once per poll's round trip, not once
   * per slot; an actor with nothing due costs its slots nothing.
   */
  private readonly behind = new Set<string>();
  private readonly quiet: PollQuiet;
  /**
   * Whether an actor here has flow limits (the registry is discovered once, before bootstrap):
   * such a node never idles, see poll.
   */
  private hostsLimits = false;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly requests: TriggerRequests,
    private readonly store: EpisodeStore,
    private readonly claims: WorkClaims,
    private readonly registry: ActorRegistry,
    private readonly slots: ActorSlots,
    private readonly mode: Mode,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    private readonly deferred: DeferredRunner,
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {
    this.quiet = new PollQuiet(options.triggerPollIdleIntervalMs, options.triggerPollIntervalMs);
  }

  onApplicationBootstrap(): void {
    this.hostsLimits = this.registry.all().some((actor) => FlowPump.limited(actor).length > 0);
    const offWake = this.events.subscribe(REQUEST_WAKE_EVENT, () => this.polls.request());
    // A run this node deferred for later is taken when due, not up to a poll interval after.
    const offDue = this.deferred.onDue(() => this.polls.request());
    // What was deferred while this node ran nothing is taken at the switch, not at the next tick.
    const offMode = this.mode.onChange((mode) => {
      if (mode === 'full') this.polls.request();
    });
    const offActor = this.mode.onActorChange((actorId) => {
      if (this.mode.of(actorId) === 'full') this.polls.request();
    });
    const offFreed = this.slots.onSlotFreed((actorId) => {
      if (this.behind.has(actorId)) this.polls.request();
    });
    // A wake-up this node wrote for itself (a sleep, a backoff) is due by its own clock: no
    // other node will say so.
    const offWritten = this.requests.onWrittenHere((dueInMs) => this.quiet.dueIn(dueInMs));
    this.unsubscribe = () => {
      offWake();
      offDue();
      offMode();
      offActor();
      offFreed();
      offWritten();
    };
    const timer = setInterval(() => {
      if (this.quiet.ticks()) this.polls.request();
    }, this.options.triggerPollIntervalMs);
    timer.unref();
    this.timer = timer;
    this.schedulerRegistry()?.addInterval(INTERVAL_NAME, timer);
    this.polls.request();
  }

  /** Stops polling (the drain calls it) and waits for a poll in flight. */
  async stop(): Promise<void> {
    this.unsubscribe?.();
    clearInterval(this.timer);
    this.timer = undefined;
    const registry = this.schedulerRegistry();
    if (registry?.doesExist('interval', INTERVAL_NAME)) registry.deleteInterval(INTERVAL_NAME);
    await this.polls.stop();
  }

  /** Polls now (tests, and a host that wants its requests picked up at once). */
  async pollNow(): Promise<void> {
    this.polls.request();
    await this.polls.idle();
  }

  private async poll(): Promise<void> {
    if (this.mode.current === 'disabled' || !this.slots.open) return;
    try {
      await this.expireOld();
      // Per actor: a trigger-only node takes requests for an actor switched to full on its own.
      const full = this.registry.all().filter((actor) => this.mode.of(actor.id) === 'full');
      const runnable = full.filter((actor) => this.slots.free(actor.id) > 0);
      const free = new Map(runnable.map((actor) => [actor.id, this.slots.free(actor.id)]));
      const capacity = [...free.values()].reduce((sum, n) => sum + n, 0);
      if (capacity === 0) {
        this.quiet.reset();
        return;
      }
      const limit = Math.min(capacity * SPREAD, BATCH);
      const sentAt = performance.now();
      const { due: pending, nextDueInMs } = await this.requests.poll(
        {
          env: this.options.triggerPollSourceEnv,
          stack: this.options.triggerPollSourceStack,
          hosted: this.registry.hostedExpectations(runnable),
          limit,
          me: this.identity.name(),
        },
        this.quiet.horizonMs,
      );
      // A full page may have left any polled actor's requests behind; otherwise only those of an
      // actor out of slots.
      for (const actorId of free.keys()) {
        if (pending.length < limit) this.behind.delete(actorId);
        else this.behind.add(actorId);
      }
      for (const request of shuffled(pending)) {
        const left = free.get(request.actorId) ?? 0;
        const started =
          left >= 1 && this.slots.runStarted(request.actorId, () => this.start(request));
        if (started) free.set(request.actorId, left - 1);
        else this.behind.add(request.actorId);
      }
      // After the requests had the slots they needed: throttled episodes another node's end made
      // startable, and those of a restart or a whole-cluster stop.
      this.slots.lookAtThrottled();
      // Not idle, so every tick polls: an actor out of slots, whose requests this poll did not
      // read (a wake-up for it, its own node's included, was heard while it had none, and its
      // freed slot polls only when it is behind); and a node hosting limits, whose throttled
      // episodes free up when another node's run ends, which nothing announces here.
      const unread = runnable.length < full.length;
      const busy = pending.length > 0 || this.behind.size > 0 || unread || this.hostsLimits;
      this.quiet.polled(sentAt, busy, nextDueInMs);
      this.outage.succeeded();
    } catch (error) {
      this.quiet.reset();
      this.outage.failed(error);
    }
  }

  /**
   * Takes `request` and starts its episode here, or ends the request with the reason; null when
   * there is nothing to run.
   */
  private async start(request: CycliumTriggerRequest): Promise<Started> {
    const me = this.identity.name();
    const key = requestClaimKey(request.id);
    let throttled = false;
    try {
      const started = await this.database.transaction<Started>(async (client) => {
        const claim = await this.claims.acquireWithin(client, key, me, {
          workType: 'trigger_request',
        });
        if (claim.status === 'busy' || !(await this.requests.take(client, request.id, me)))
          return null;
        const fence = claim.status === 'acquired' ? claim.claim.fence : null;
        // A limited expectation's episode waits for the admission instead (the slot this start
        // reserved frees, and the flow queue looks).
        const limited = this.registry.expectation(request.actorId, request.expectationId);
        const episode =
          limited && isLimited(limited.options)
            ? await this.store.throttle(
                client,
                request.episodeId,
                (row) =>
                  episodeFlow(
                    limited,
                    row.triggerRef as unknown as EpisodeTrigger,
                    this.logger,
                  ) ?? {
                    key: '',
                    rateKey: null,
                    priority: 0,
                  },
              )
            : await this.store.startDeferred(client, request.episodeId, me);
        if (!episode) {
          const status = await this.store.statusOf(client, request.episodeId);
          if (status === null)
            await this.requests.fail(
              client,
              request.id,
              `episode ${request.episodeId} no longer exists`,
            );
          else
            await this.requests.note(
              client,
              request.id,
              `episode ${request.episodeId} was ${status}, not deferred: nothing to run`,
            );
          await this.claims.completeWithin(client, key, me, fence);
          return null;
        }
        // The row this take returned, not an earlier read: what runs is what was checked.
        if (!this.requests.verify(request, episode)) throw new TamperedTake(episode);
        if (episode.status === 'throttled') {
          await this.claims.completeWithin(client, key, me, fence);
          throttled = true;
          return null;
        }
        const grant = await this.claims.acquireWithin(client, claimKeyOf(episode), me);
        if (grant.status === 'busy') throw new EpisodeClaimBusy();
        await this.claims.completeWithin(client, key, me, fence);
        // A restart recovery deferred to a full node, not a wake-up of a sleep or a wait.
        const takenOver = request.opts.resume === true && request.opts.wake === undefined;
        return { episode, grant, resumed: request.opts.resume === true, takenOver };
      });
      if (throttled) this.slots.noteThrottled(request.actorId);
      if (started)
        this.telemetry.emit('trigger_requests.dispatched', {
          requestId: request.id,
          episodeId: request.episodeId,
        });
      else this.logger.debug(`trigger request ${request.id}: nothing to run here`);
      return started;
    } catch (error) {
      if (error instanceof EpisodeClaimBusy) return null; // the request stays pending, for later
      const failed =
        error instanceof TamperedTake
          ? await this.refuse(request, error.episode).then(
              () => null,
              (e: unknown) => e,
            )
          : error;
      if (failed !== null)
        this.logger.warn(`could not take trigger request ${request.id}: ${errorMessage(failed)}`);
      return null;
    }
  }

  /**
   * A request and episode that do not verify together (the `integrity` option; the take that read
   * them rolled back): the request is failed with its deferred episode (`tampered`, whose event a
   * waiting workflow hears), and nothing of it runs; the node goes on with the next.
   */
  private async refuse(request: CycliumTriggerRequest, episode: EpisodeRow): Promise<void> {
    const reason =
      `trigger request ${request.id} is not signed by this deployment's integrity ` +
      `key (edited, copied or forged): not run`;
    const { announce, failed } = await this.database.transaction(async (client) => {
      await this.requests.fail(client, request.id, reason);
      return this.failDeferred(client, [{ episodeId: episode.id, reason }], 'tampered');
    });
    announce();
    this.logger.warn(
      `${
        failed.length > 0
          ? `${episodeLabel(episode)} failed as ` + `tampered`
          : `${episodeLabel(episode)} not run`
      }: ${reason}`,
    );
  }

  /**
   * A tenth of the TTL late at most (and at most once a minute, once per poll interval at least): a
   * request's TTL is long, and an idle cluster should not pay a transaction per node per poll for
   * it.
   */
  private async expireOld(): Promise<void> {
    const now = performance.now();
    const every = Math.max(
      this.options.triggerPollIntervalMs,
      Math.min(60_000, this.options.triggerRequestTtlMs / 10),
    );
    if (now - this.lastExpiry < every) return;
    this.lastExpiry = now;
    // Every terminal path publishes its event: a workflow waiting on one of these hears it failed.
    const { expired, announce, failed } = await this.database.transaction(async (client) => {
      const me = this.mode.current === 'full' ? this.identity.name() : null;
      const requests = await this.requests.expire(client, this.options.triggerPollSourceEnv, me);
      return {
        expired: requests,
        ...(await this.failDeferred(client, requests, 'trigger_request_expired')),
      };
    });
    announce();
    if (expired.length === 0) return;
    const reasons = new Map(expired.map((r) => [r.episodeId, r]));
    for (const episode of failed) {
      const request = reasons.get(episode.id);
      this.logger.warn(
        (
          `${episodeLabel(episode)} failed as trigger_request_expired: ` +
          `request ${request?.id ?? '?'} ${request?.reason ?? ''}`
        ).trim(),
      );
    }
    // A request whose episode no longer waited on it failed nothing: worth a trace, not a warning.
    const failedIds = new Set(failed.map((e) => e.id));
    for (const request of expired)
      if (!failedIds.has(request.episodeId))
        this.logger.debug(`trigger request ${request.id} expired: ${request.reason}`);
    this.telemetry.emit('trigger_requests.expired', { count: expired.length });
  }

  /**
   * Fails the deferred episodes of ended requests as `errorClass`, with their `episode.failed`
   * events in the same transaction.
   */
  private async failDeferred(
    client: SqlExecutor,
    failures: Array<{ episodeId: string; reason: string }>,
    errorClass: 'trigger_request_expired' | 'tampered',
  ): Promise<{ announce: Announce; failed: EpisodeRow[] }> {
    const failed = await this.store.failDeferred(client, failures, errorClass);
    const me = this.identity.name();
    const announce = await this.events.within(
      client,
      failed.map((episode) =>
        lifecycleEvent('episode.failed', episode, 'failed', me, { errorClass }),
      ),
    );
    return { announce, failed };
  }

  private schedulerRegistry(): SchedulerRegistry | undefined {
    try {
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      return undefined; // the app did not import ScheduleModule: the timer runs all the same
    }
  }
}
