import { Injectable } from '@nestjs/common';
import { ActorSlots } from './actor-slots.service.js';
import type { DispatchOptions } from './dispatch-result.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { DeferredRunner, type OnCommitResult } from './deferred-runner.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { DispatchResult } from './dispatch-result.js';
import type { TriggerDelay } from '../episodes/trigger-input.js';
import { Mode } from './mode.service.js';

/**
 * The seam between what triggers an episode and what runs it: the actor's mode on this node picks
 * the runner — its slots here (`full`), a trigger request for a full node (`trigger_only`), or
 * nothing (`disabled`); a run for later (a trigger's delay, or its expectation's) is a trigger
 * request due then, in any mode. Trigger sources and `Episodes.trigger` go through it; the slots
 * and the runners never ask about modes.
 */
@Injectable()
export class Dispatcher {
  constructor(
    private readonly mode: Mode,
    private readonly slots: ActorSlots,
    private readonly deferred: DeferredRunner,
  ) {}

  dispatch(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<DispatchResult> {
    const mode = this.mode.of(expectation.actorId);
    if (mode === 'disabled') return Promise.resolve({ status: 'disabled' });
    const delay = this.delayOf(expectation, options);
    // A run for later waits as a row, whatever the mode: the node that is up when it is due starts
    // it.
    if (delay) return this.deferred.defer(expectation, trigger, { ...options, delay });
    if (mode === 'full') return this.slots.dispatch(expectation, trigger, options);
    // Paused cluster-wide: due now, so the request waits out the pause however long (a request to
    // run now expires after triggerRequestTtlMs).
    if (this.mode.isPaused(expectation.actorId))
      return this.deferred.defer(expectation, trigger, { ...options, delay: { ms: 0 } });
    return this.deferred.defer(expectation, trigger, options);
  }

  /**
   * A trigger written through the host's open transaction on `client`: whatever the mode (bar
   * disabled), a request that a full node takes once the host commits, due at its delay (or its
   * expectation's), else at once; like every request with a due time it never expires. Nothing can
   * run before the commit, so nothing runs here first.
   */
  dispatchInHost(
    client: SqlExecutor,
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<OnCommitResult | { status: 'disabled' }> {
    if (this.mode.of(expectation.actorId) === 'disabled')
      return Promise.resolve({ status: 'disabled' });
    // Accepted once the host commits, however long its transaction stayed open: due at once when
    // not later, so it never expires.
    const delay = this.delayOf(expectation, options) ?? { ms: 0 };
    return this.deferred.deferInHost(client, expectation, trigger, { ...options, delay });
  }

  /**
   * A full peer queued an episode of `actorId` and offered it here: the slots take it from that
   * queue only where the actor runs (`full`); elsewhere the row stays with its owner.
   */
  offered(actorId: string): void {
    if (this.mode.of(actorId) === 'full') this.slots.noteOffered(actorId);
  }

  /**
   * True when a trigger of `actorId` dispatched now would start at once here (the actor runs here
   * and has a free slot).
   */
  canStartNow(actorId: string): boolean {
    return this.mode.of(actorId) === 'full' && this.slots.free(actorId) > 0;
  }

  /**
   * A trigger this node can no longer run (it is draining), left to a full node as a trigger
   * request, due when the trigger would have been run here (its delay, or its expectation's, kept).
   * Accepted work: due at once when not later, so it never expires, however long the cluster is
   * down.
   */
  handOver(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<DispatchResult> {
    const delay = this.delayOf(expectation, options) ?? { ms: 0 };
    return this.deferred.defer(expectation, trigger, { ...options, delay });
  }

  /**
   * The delay the trigger asked for (null: none), else its expectation's `delayMs`; null to run
   * now.
   */
  private delayOf(
    expectation: RegisteredExpectation,
    options: DispatchOptions,
  ): TriggerDelay | null {
    if (options.delay !== undefined) return options.delay;
    const delayMs = expectation.options.delayMs;
    return delayMs ? { ms: delayMs } : null;
  }
}
