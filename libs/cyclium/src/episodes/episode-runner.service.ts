import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { ClaimHold } from '../claims/claim-hold.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_CLOCK, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { CycliumClock } from '../primitives/clock.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { TamperedRowError } from '../integrity/tampered-row.error.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type {
  Convergence,
  EpisodeMethod,
  EpisodeRow,
  EpisodeTrigger,
} from './episode-context.interface.js';
import { EpisodeInterruptedError, EpisodeSleeping, EpisodeWaiting } from './episode-errors.js';
import {
  CHILD_STARTER,
  WAIT_STEPS,
  type ChildStarter,
  type WaitStepRunner,
} from './wait-ports.interface.js';
import { BeginWrites } from './begin-writes.js';
import { CANCEL_EVENT, lifecycleEvent, type LifecycleEventType } from './episode-events.js';
import { EpisodeStatements, type Ownership } from './episode-statements.js';
import { EpisodeQueue } from './episode-queue.js';
import { EpisodeStore, RESUME_START, toEpisode } from './episode-store.js';
import type { NewEpisode } from './episode-inserts.js';
import { EpisodeEndings, describeEpisode } from './episode-endings.service.js';
import { episodeLabel } from './episode-log-lines.js';
import { TransactionSteps } from './transaction-steps.js';
import { OwnedWrites, type WriteScope } from './owned-writes.js';
import { EpisodeSignatures } from './episode-signatures.js';
import { RunningEpisode } from './running-episode.js';
import { RUN_TRACER, type RunTracer } from './run-tracer.interface.js';
import { EpisodeVersions, VERSION_HAND_BACK_MS } from './episode-versions.js';
import { EpisodeHandedBack } from './patch-errors.js';
import { claimKeyOf } from '../claims/claim-keys.js';

export type BeginResult =
  | { status: 'started'; episode: EpisodeRow; grant: AcquireResult }
  | { status: 'duplicate' }
  | { status: 'busy' };

/** Rolls back a begin whose claim was busy: the node then writes nothing at all. */
class ClaimBusy extends Error {
  override readonly name = 'ClaimBusy';
}

export interface RunOptions {
  resumed?: boolean;
  /** Recovery took the episode over from a node that stopped holding it (its trace records it). */
  takenOver?: boolean;
  /**
   * The row is this node's own insert as its statement returned it (a fresh begin): no one else's
   * row to check.
   */
  inserted?: boolean;
  /**
   * A hold already renewing this claim (a restart handed over by recovery); otherwise one is made
   * from the grant.
   */
  hold?: ClaimHold;
  /**
   * Called once the method has returned or thrown, before the end is written: the slot it held can
   * start the next episode, whose begin then shares a commit with this end instead of waiting for
   * it.
   */
  returned?: () => void;
}

/**
 * Starts episodes (with their claims) and runs each from its claim to its terminal status: steps
 * fenced one statement each, then the end, which EpisodeEndings records. Every terminal path
 * publishes exactly one terminal event (in the same transaction as the status, with a durable
 * bus); a run that lost its claim, or whose node is draining, writes nothing more (the episode is
 * someone else's, or stamped for a restart).
 */
@Injectable()
export class EpisodeRunner implements OnModuleInit {
  private readonly logger = new Logger('CycliumEpisodes');
  private readonly running = new Map<string, RunningEpisode>();
  /** Stamped by the drain: whatever these runs hit from now on, they record nothing. */
  private readonly interrupted = new Set<string>();
  private childStarter: ChildStarter | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeStore,
    private readonly queue: EpisodeQueue,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
    private readonly statements: EpisodeStatements,
    private readonly writes: OwnedWrites,
    private readonly begins: BeginWrites,
    private readonly endings: EpisodeEndings,
    private readonly signatures: EpisodeSignatures,
    private readonly versions: EpisodeVersions,
    private readonly transactionSteps: TransactionSteps,
    @Inject(WAIT_STEPS) private readonly waitSteps: WaitStepRunner,
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
    @Inject(RUN_TRACER) private readonly traces: RunTracer,
    @Inject(CYCLIUM_CLOCK) private readonly clock: CycliumClock,
  ) {}

  onModuleInit(): void {
    // The prompt path; the durable one is the flag the next step write reads back. The event only
    // wakes the run: whoever may insert into cyclium_events could publish one, so the row's flag
    // decides.
    this.events.subscribe<{ episodeId: string }>(CANCEL_EVENT, (event) => {
      const running = this.running.get(event.payload.episodeId);
      if (running) void this.endings.honourCancel(running);
    });
  }

  /**
   * Resolved at the first child: the starter triggers through the dispatcher, whose slots run
   * episodes here.
   */
  private children(): ChildStarter {
    this.childStarter ??= this.moduleRef.get<ChildStarter>(CHILD_STARTER, { strict: false });
    return this.childStarter;
  }

  /** Episodes running on this node now, from the first moment of their run. */
  inFlight(): RunningEpisode[] {
    return [...this.running.values()];
  }

  /**
   * Inserts a running episode and takes its claim, one round trip; busy or duplicate writes
   * nothing.
   */
  begin(spec: NewEpisode): Promise<BeginResult> {
    if (this.statements.beginsInOneStatement) return this.begins.begin(spec);
    return this.claimWith((client) => this.store.insert(spec, client));
  }

  /**
   * Takes this node's oldest queued episode of `actorId` (of one of its `expectations`) and its
   * claim, in one transaction; `duplicate` when none is left.
   */
  beginQueued(actorId: string, expectations: readonly string[]): Promise<BeginResult> {
    return this.claimWith((client) =>
      this.queue.dequeue(actorId, expectations, this.identity.name(), client),
    );
  }

  /**
   * The start of one episode that `admit` moves to running inside this transaction (a limited
   * expectation's admission, FlowAdmissions.admitWithin), with its claim; `duplicate` when it
   * admitted none.
   */
  beginAdmitted(admit: (client: SqlExecutor) => Promise<EpisodeRow | null>): Promise<BeginResult> {
    return this.claimWith(admit);
  }

  /**
   * The start of an episode (of one of `expectations`) queued on a full peer, taken from its queue
   * (EpisodeQueue.takeFromPeer); duplicate when none is left.
   */
  beginFromPeer(actorId: string, expectations: readonly string[]): Promise<BeginResult> {
    const scope = { stack: this.options.stackSlug, env: this.options.env };
    const owner = this.identity.name();
    return this.claimWith((client) =>
      this.queue.takeFromPeer(actorId, expectations, owner, scope, client),
    );
  }

  /**
   * The start of a restart recovery handed over with its claim: the episode leaves `recovering`,
   * fenced on that claim, with its `episode.started`. Null when the claim or the episode moved on.
   */
  async startResumed(episode: EpisodeRow, grant: AcquireResult): Promise<EpisodeRow | null> {
    const ownership = this.ownershipOf(episode, grant);
    const started = await this.database.transaction(async (client) => {
      const { rows } = await this.claims.fencedStatement(client, ownership, RESUME_START, [
        episode.id,
      ]);
      if (!rows[0]) return null;
      const row = toEpisode(rows[0]);
      if (this.options.startedEvents)
        await this.events.within(client, [this.lifecycle('episode.started', row, 'running')], {
          wake: false,
        });
      return row;
    });
    return started;
  }

  /**
   * `load` writes the running row; the claim (and `episode.started`, when enabled) commits with it
   * or nothing does.
   */
  private async claimWith(
    load: (client: SqlExecutor) => Promise<EpisodeRow | null>,
  ): Promise<BeginResult> {
    try {
      return await this.database.transaction(async (client) => {
        const episode = await load(client);
        if (!episode) return { status: 'duplicate' as const };
        const grant = await this.claims.acquireWithin(
          client,
          claimKeyOf(episode),
          this.identity.name(),
        );
        if (grant.status === 'busy') throw new ClaimBusy();
        if (this.options.startedEvents)
          await this.events.within(
            client,
            [this.lifecycle('episode.started', episode, 'running')],
            { wake: false },
          );
        return { status: 'started' as const, episode, grant };
      });
    } catch (error) {
      if (error instanceof ClaimBusy) return { status: 'busy' };
      throw error;
    }
  }

  /**
   * Cancels an episode that has not started (queued, or deferred) and announces it, in one
   * transaction; null when it had.
   */
  async cancelQueued(id: string): Promise<EpisodeRow | null> {
    return this.announceWith(async (client) => {
      const [episode] = await this.store.cancelWaiting([id], client);
      return episode
        ? { episode, event: this.lifecycle('episode.canceled', episode, 'canceled') }
        : null;
    });
  }

  /**
   * Cancels this node's oldest queued episode of `actorId` (shedding), with its event; null when
   * none is queued.
   */
  async shedOldest(actorId: string): Promise<EpisodeRow | null> {
    return this.announceWith(async (client) => {
      const episode = await this.queue.cancelOldestQueued(actorId, this.identity.name(), client);
      return episode && { episode, event: this.lifecycle('episode.canceled', episode, 'canceled') };
    });
  }

  private async announceWith(
    write: (
      client: SqlExecutor,
    ) => Promise<{ episode: EpisodeRow; event: { type: string; payload: unknown } } | null>,
  ): Promise<EpisodeRow | null> {
    const done = await this.database.transaction(async (client) => {
      const written = await write(client);
      return (
        written && {
          episode: written.episode,
          announce: await this.events.within(client, [written.event]),
        }
      );
    });
    done?.announce();
    return done?.episode ?? null;
  }

  /**
   * The drain stamped these episodes for a restart elsewhere: from now on their runs record
   * nothing, whatever they hit (a step write colliding with the drain's marker, say).
   */
  markInterrupted(ids: readonly string[]): void {
    for (const id of ids) this.interrupted.add(id);
  }

  /**
   * Whether the row a take returned may run (the `integrity` option). A row read unsigned while
   * unsigned rows were still accepted may be judged after this node has seen the cut-over, which
   * signed it in flight meanwhile: its signature now, over the same fields, decides. A row nobody
   * with the key wrote has none still.
   */
  private async admitted(episode: EpisodeRow): Promise<boolean> {
    if (this.signatures.accepts(episode)) return true;
    if (!this.signatures.mayBeSignedSince(episode)) return false;
    const signature = (await this.store.get(episode.id))?.signature ?? null;
    return signature !== null && this.signatures.accepts({ ...episode, signature });
  }

  /**
   * Runs the episode to its end with `expectation`, the method its actor declares (undefined when
   * this node does not host it: the episode fails as `unknown_actor`; a row that does not verify
   * with the `integrity` option fails as `tampered`). Never rejects: every outcome is recorded (or,
   * when the claim is lost, left alone).
   */
  async run(
    episode: EpisodeRow,
    expectation: EpisodeMethod | undefined,
    grant: AcquireResult,
    options: RunOptions = {},
  ): Promise<void> {
    const resumed = options.resumed ?? false;
    const ownership = this.ownershipOf(episode, grant);
    const hold = options.hold ?? this.claims.hold(ownership.key, grant);
    const scope = this.writes.scope(episode.id, hold);
    const trace = this.traces.start(episode, { resumed, takenOver: options.takenOver ?? false });
    const context = new RunningEpisode({
      episode,
      trigger: episode.triggerRef as unknown as EpisodeTrigger,
      fence: ownership.fence,
      resumed,
      hold,
      history: resumed ? this.history(scope) : { checkpoints: new Map(), nextJournalNo: 1 },
      budget: expectation?.options.budget,
      // Stamped by the drain, whose marker takes the next journal position before the claim goes:
      // a step that ends meanwhile writes nothing, as it would once the claim is released.
      writeStep: (record) =>
        this.interrupted.has(episode.id)
          ? Promise.resolve('not_owner' as const)
          : this.writes.step(scope, ownership, record),
      transactionStep: (step) =>
        this.interrupted.has(episode.id)
          ? Promise.resolve({ outcome: 'not_owner' as const, result: undefined, durationMs: 0 })
          : this.transactionSteps.run(scope, ownership, step),
      waitStep: async (step) => {
        if (this.interrupted.has(episode.id)) return { outcome: 'not_owner', result: undefined };
        const done = await this.waitSteps.run(scope, ownership, step);
        if ((done.outcome === 'written' || done.outcome === 'cancel_requested') && done.result)
          this.telemetry.emit('episode.wait_ended', {
            ...describeEpisode(episode),
            name: step.name,
            kind: step.wait.kind,
            outcome: (done.result as { status: 'received' | 'done' | 'timed_out' }).status,
          });
        return done;
      },
      startChild: (manager, child) => this.children().start(manager, episode, child),
      trace,
      now: () => this.clock.now(),
      stepWritten: (durationMs) => {
        if (this.telemetry.wants('episode.step'))
          this.telemetry.emit('episode.step', {
            actorId: episode.actorId,
            expectationId: episode.expectationId,
            durationMs,
          });
      },
    });
    this.running.set(episode.id, context);
    try {
      // The row the take returned, checked in memory (the `integrity` option): a forged or edited
      // one fails as tampered before anything of it runs.
      const forged = !options.inserted && !(await this.admitted(episode));
      if (forged) throw new TamperedRowError('cyclium_episodes', episode.id);
      if (!expectation) {
        throw Object.assign(
          new Error(
            `no actor ${episode.actorId} with expectation ${episode.expectationId} on this node`,
          ),
          {
            errorClass: 'unknown_actor',
          },
        );
      }
      this.telemetry.emit(
        resumed ? 'episode.resumed' : 'episode.started',
        describeEpisode(episode),
      );
      const fence = `fence ${ownership.fence ?? 'none'}`;
      this.logger.debug(
        `${episodeLabel(episode)} ` +
          `${resumed ? `resumed (attempt ${episode.attempts}, ${fence})` : `started (${fence})`}`,
      );
      // Code of another version must not replay this journal; a versioned first run records it.
      if (expectation.options.version !== undefined || episode.version) {
        const lacks = await this.versions.check(episode, expectation.options);
        if (lacks) {
          throw new EpisodeHandedBack(lacks, VERSION_HAND_BACK_MS);
        }
      }
      await context.prepare();
      context.throwIfAborted();
      let result: Convergence | undefined;
      try {
        result = (await trace.within(() => expectation.handler(context))) as
          Convergence | undefined;
      } finally {
        options.returned?.();
      }
      // A step written meanwhile (the method awaited something after it) is answered first.
      await context.writesSettled();
      // A last step unwritten rides in the end's statement, which reads the cancel flag itself.
      if (!context.wroteStep && !context.hasUnwritten) await this.endings.honourCancel(context);
      context.throwIfAborted();
      // Stamped by the drain: the step alone is refused (not_owner), as any write of the run.
      if (this.interrupted.has(episode.id)) await context.flushUnwritten();
      const lastStep = context.takeUnwritten();
      if (await this.endings.converge(episode, ownership, scope, result ?? {}, lastStep))
        context.carried();
      else {
        // Refused with the step: a cancel came meanwhile (the step alone then stops the run, as it
        // would have before the end), a drain stamped it or the claim is gone (the step alone is
        // refused and says so).
        await context.flushUnwritten(lastStep);
        context.throwIfAborted();
        await this.endings.converge(episode, ownership, scope, result ?? {});
      }
    } catch (error) {
      const cause = context.signal.aborted ? (context.signal.reason as unknown) : error;
      // A step the method finished before it failed (or slept) is journaled before its end.
      if (!this.interrupted.has(episode.id) && !(cause instanceof EpisodeWaiting))
        await context.flushUnwritten().catch(() => undefined);
      // Stamped by the drain: the restart elsewhere carries on from the last checkpoint.
      if (cause instanceof EpisodeInterruptedError || this.interrupted.has(episode.id)) {
        this.logger.debug(
          `${episodeLabel(episode)} stopped by the drain: a peer restarts it from its last ` +
            `checkpoint`,
        );
      } else if (cause instanceof EpisodeWaiting) {
        // Its transaction already recorded the wait and gave the claim up.
        this.logger.debug(`${episodeLabel(episode)} waits: ${cause.message}`);
        this.telemetry.emit('episode.waiting', {
          ...describeEpisode(episode),
          name: cause.waitName,
          kind: cause.kind,
          deadline: cause.deadline,
        });
      } else if (cause instanceof EpisodeSleeping) {
        await this.endings
          .sleep(episode, ownership, scope, cause)
          .catch((e: unknown) =>
            this.logger.error(
              `could not record the sleep of episode ${episode.id}: ${errorMessage(e)}`,
            ),
          );
      } else {
        await this.endings
          .settle(
            episode,
            ownership,
            scope,
            cause,
            expectation?.options,
            context.stepThatThrew(cause),
          )
          .catch((e: unknown) =>
            this.logger.error(
              `could not record the end of episode ${episode.id}: ${errorMessage(e)}`,
            ),
          );
      }
    } finally {
      this.running.delete(episode.id);
      this.interrupted.delete(episode.id);
      hold.release();
      this.traces.finish(episode.id, trace);
    }
  }

  private history(scope: WriteScope) {
    const loaded = this.writes.history(scope);
    // Read by the first step; a method that takes no step must not leave its failure unhandled.
    loaded.catch(() => undefined);
    return loaded;
  }

  private ownershipOf(episode: EpisodeRow, grant: AcquireResult): Ownership {
    return {
      key: claimKeyOf(episode),
      owner: this.identity.name(),
      fence: grant.status === 'acquired' ? grant.claim.fence : null,
    };
  }

  private lifecycle(
    type: LifecycleEventType,
    episode: EpisodeRow,
    status: EpisodeStatus,
    extra = {},
  ) {
    return lifecycleEvent(type, episode, status, this.identity.name(), extra);
  }
}
