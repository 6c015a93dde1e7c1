import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { ClaimHold } from '../claims/claim-hold.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { Outputs } from '../outputs/outputs.service.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { Convergence, EpisodeMethod, EpisodeRow, EpisodeTrigger } from './episode-context.interface.js';
import {
  BudgetExceededError,
  EpisodeCanceledError,
  EpisodeInterruptedError,
  EpisodeWriteUnavailableError,
  NondeterministicResumeError,
} from './episode-errors.js';
import { BeginWrites } from './begin-writes.js';
import { CANCEL_EVENT, lifecycleEvent, type LifecycleEventType } from './episode-events.js';
import { EpisodeStatements, type Ownership } from './episode-statements.js';
import { EpisodeQueue } from './episode-queue.js';
import { EpisodeStore, RESUME_START, toEpisode, type NewEpisode } from './episode-store.js';
import { OwnedWrites, type WriteScope } from './owned-writes.js';
import { RunningEpisode } from './running-episode.js';
import { claimKeyOf } from '../claims/claim-keys.js';

export type BeginResult = { status: 'started'; episode: EpisodeRow; grant: AcquireResult } | { status: 'duplicate' } | { status: 'busy' };

/** Rolls back a begin whose claim was busy: the node then writes nothing at all. */
class ClaimBusy extends Error {
  override readonly name = 'ClaimBusy';
}

export interface RunOptions {
  resumed?: boolean;
  /** A hold already renewing this claim (a restart handed over by recovery); otherwise one is made from the grant. */
  hold?: ClaimHold;
}

/** Failures the library decides rather than the host's code: each gets a warning with the episode's id. */
const DECIDED = new Set(['unknown_actor', 'nondeterministic_resume', 'budget_exceeded']);

/**
 * Runs one episode from its claim to its terminal status: steps fenced one statement each, then
 * the post-converge transaction. Every terminal path publishes exactly one terminal event (in the
 * same transaction as the status, with a durable bus); a run that lost its claim, or whose node
 * is draining, writes nothing more (the episode is someone else's, or stamped for a restart).
 */
@Injectable()
export class EpisodeRunner implements OnModuleInit {
  private readonly logger = new Logger(EpisodeRunner.name);
  private readonly running = new Map<string, RunningEpisode>();
  /** Stamped by the drain: whatever these runs hit from now on, they record nothing. */
  private readonly interrupted = new Set<string>();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeStore,
    private readonly queue: EpisodeQueue,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly outputs: Outputs,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
    private readonly statements: EpisodeStatements,
    private readonly writes: OwnedWrites,
    private readonly begins: BeginWrites,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onModuleInit(): void {
    // The prompt path; the durable one is the flag the next step write reads back.
    this.events.subscribe<{ episodeId: string }>(CANCEL_EVENT, (event) => {
      this.running.get(event.payload.episodeId)?.stop(new EpisodeCanceledError(event.payload.episodeId));
    });
  }

  /** Episodes running on this node now, from the first moment of their run. */
  inFlight(): RunningEpisode[] {
    return [...this.running.values()];
  }

  /** Inserts a running episode and takes its claim, one round trip; busy or duplicate writes nothing. */
  begin(spec: NewEpisode): Promise<BeginResult> {
    if (this.statements.beginsInOneStatement) return this.begins.begin(spec);
    return this.claimWith((client) => this.store.insert(spec, client));
  }

  /** Takes this node's oldest queued episode of `actorId` and its claim, in one transaction; `duplicate` when none is left. */
  beginQueued(actorId: string): Promise<BeginResult> {
    return this.claimWith((client) => this.queue.dequeue(actorId, this.identity.name(), client));
  }

  /** The start of an episode queued on a full peer, taken from its queue (EpisodeQueue.takeFromPeer); duplicate when none is left. */
  beginFromPeer(actorId: string): Promise<BeginResult> {
    const scope = { stack: this.options.stackSlug, env: this.options.env };
    return this.claimWith((client) => this.queue.takeFromPeer(actorId, this.identity.name(), scope, client));
  }

  /**
   * The start of a restart recovery handed over with its claim: the episode leaves `recovering`,
   * fenced on that claim, with its `episode.started`. Null when the claim or the episode moved on.
   */
  async startResumed(episode: EpisodeRow, grant: AcquireResult): Promise<EpisodeRow | null> {
    const ownership = this.ownershipOf(episode, grant);
    const started = await this.database.transaction(async (client) => {
      const { rows } = await this.claims.fencedStatement(client, ownership, RESUME_START, [episode.id]);
      if (!rows[0]) return null;
      const row = toEpisode(rows[0]);
      if (this.options.startedEvents) await this.events.within(client, [this.lifecycle('episode.started', row, 'running')], { wake: false });
      return row;
    });
    return started;
  }

  /**
   * `load` writes the running row; the claim (and `episode.started`, when enabled) commits with it
   * or nothing does.
   */
  private async claimWith(load: (client: SqlExecutor) => Promise<EpisodeRow | null>): Promise<BeginResult> {
    try {
      return await this.database.transaction(async (client) => {
        const episode = await load(client);
        if (!episode) return { status: 'duplicate' as const };
        const grant = await this.claims.acquireWithin(client, claimKeyOf(episode), this.identity.name());
        if (grant.status === 'busy') throw new ClaimBusy();
        if (this.options.startedEvents) await this.events.within(client, [this.lifecycle('episode.started', episode, 'running')], { wake: false });
        return { status: 'started' as const, episode, grant };
      });
    } catch (error) {
      if (error instanceof ClaimBusy) return { status: 'busy' };
      throw error;
    }
  }

  /** Cancels an episode that has not started (queued, or deferred) and announces it, in one transaction; null when it had. */
  async cancelQueued(id: string): Promise<EpisodeRow | null> {
    return this.announceWith(async (client) => {
      const [episode] = await this.store.cancelWaiting([id], client);
      return episode ? { episode, event: this.lifecycle('episode.canceled', episode, 'canceled') } : null;
    });
  }

  /** Cancels this node's oldest queued episode of `actorId` (shedding), with its event; null when none is queued. */
  async shedOldest(actorId: string): Promise<EpisodeRow | null> {
    return this.announceWith(async (client) => {
      const episode = await this.queue.cancelOldestQueued(actorId, this.identity.name(), client);
      return episode && { episode, event: this.lifecycle('episode.canceled', episode, 'canceled') };
    });
  }

  private async announceWith(
    write: (client: SqlExecutor) => Promise<{ episode: EpisodeRow; event: { type: string; payload: unknown } } | null>,
  ): Promise<EpisodeRow | null> {
    const done = await this.database.transaction(async (client) => {
      const written = await write(client);
      return written && { episode: written.episode, announce: await this.events.within(client, [written.event]) };
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
   * Runs the episode to its end with `expectation`, the method its actor declares (undefined when
   * this node does not host it: the episode fails as `unknown_actor`). Never rejects: every outcome
   * is recorded (or, when the claim is lost, left alone).
   */
  async run(episode: EpisodeRow, expectation: EpisodeMethod | undefined, grant: AcquireResult, options: RunOptions = {}): Promise<void> {
    const resumed = options.resumed ?? false;
    const ownership = this.ownershipOf(episode, grant);
    const hold = options.hold ?? this.claims.hold(ownership.key, grant);
    const scope = this.writes.scope(episode.id, hold);
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
      writeStep: (record) => (this.interrupted.has(episode.id) ? Promise.resolve('not_owner' as const) : this.writes.step(scope, ownership, record)),
    });
    this.running.set(episode.id, context);
    try {
      if (!expectation) {
        throw Object.assign(new Error(`no actor ${episode.actorId} with expectation ${episode.expectationId} on this node`), {
          errorClass: 'unknown_actor',
        });
      }
      this.telemetry.emit(resumed ? 'episode.resumed' : 'episode.started', this.describe(episode));
      context.throwIfAborted();
      const result = (await expectation.handler(context)) as Convergence | undefined;
      if (!context.wroteStep) await this.honourCancel(context);
      context.throwIfAborted();
      await this.converge(episode, ownership, scope, result ?? {});
    } catch (error) {
      const cause = context.signal.aborted ? (context.signal.reason as unknown) : error;
      await this.settle(episode, ownership, scope, cause).catch((e: unknown) =>
        this.logger.error(`could not record the end of episode ${episode.id}: ${errorMessage(e)}`),
      );
    } finally {
      this.running.delete(episode.id);
      this.interrupted.delete(episode.id);
      hold.release();
    }
  }

  /**
   * A run that wrote no step never read its cancel flag back, and its bus message can come before
   * the run exists here (a cancel right after the begin) or not at all (another channel): the flag
   * is read once at its end. The method has run by then; the episode still ends `canceled`, its
   * findings and outputs unwritten, as when a cancel is heard after the last step. A read that
   * fails leaves the end to the end write, which meets the same fault.
   */
  private async honourCancel(context: RunningEpisode): Promise<void> {
    if (context.signal.aborted) return;
    try {
      if (await this.store.cancelRequested(context.episode.id)) context.stop(new EpisodeCanceledError(context.episode.id));
    } catch (error) {
      this.logger.warn(`could not read whether episode ${context.episode.id} was canceled: ${errorMessage(error)}`);
    }
  }

  private history(scope: WriteScope) {
    const loaded = this.writes.history(scope);
    // Read by the first step; a method that takes no step must not leave its failure unhandled.
    loaded.catch(() => undefined);
    return loaded;
  }

  private ownershipOf(episode: EpisodeRow, grant: AcquireResult): Ownership {
    return { key: claimKeyOf(episode), owner: this.identity.name(), fence: grant.status === 'acquired' ? grant.claim.fence : null };
  }

  /**
   * Post-converge (rule 4): ownership at the fence, findings, outputs, status, checkpoints, claim
   * and the terminal event — one statement.
   */
  private async converge(episode: EpisodeRow, ownership: Ownership, scope: WriteScope, result: Convergence): Promise<void> {
    const status: EpisodeStatus = result.status === 'partially_failed' ? 'partially_failed' : 'done';
    // The outputs' leases run from the database's now(), which is later than this.
    const sentAt = performance.now();
    const won = await this.writes.end(scope, episode, ownership, {
      terminal: { status, summary: result.summary ?? null, classification: result.classification },
      findings: result.findings,
      outputs: result.outputs,
      event: this.lifecycle('episode.completed', episode, status),
    });
    if (won === null) throw new ClaimLostError(ownership.key, ownership.fence, 'not_owner');
    this.telemetry.emit('episode.completed', { ...this.describe(episode), status });
    if (won.length > 0) await this.outputs.deliver(won, sentAt);
  }

  /** Records how a run that did not converge ended, fenced like every other write, with its terminal event. */
  private async settle(episode: EpisodeRow, ownership: Ownership, scope: WriteScope, cause: unknown): Promise<void> {
    // Stamped by the drain: the restart elsewhere carries on from the last checkpoint.
    if (cause instanceof EpisodeInterruptedError || this.interrupted.has(episode.id)) return;
    // A lost claim, or a fault of the library's own writes (rule 12): the episode is someone else's, or recovery's.
    if (cause instanceof ClaimLostError || cause instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, cause.message);
      return;
    }
    const [status, errorClass, detail] = classify(cause);
    const event = status === 'canceled' ? 'episode.canceled' : 'episode.failed';
    const recorded = await this.writes
      .end(scope, episode, ownership, { terminal: { status, errorClass, detail }, event: this.lifecycle(event, episode, status, { errorClass }) })
      .catch((error: unknown) => {
        if (error instanceof EpisodeWriteUnavailableError) return error;
        throw error;
      });
    if (recorded instanceof EpisodeWriteUnavailableError) {
      this.abandon(episode, recorded.message);
      return;
    }
    if (recorded === null) {
      this.logger.warn(`episode ${episode.id} aborted: claim lost before its outcome was recorded`);
      this.telemetry.emit('episode.aborted', { ...this.describe(episode), reason: 'claim lost before the outcome was recorded' });
      return;
    }
    if (DECIDED.has(errorClass)) {
      this.logger.warn(`episode ${episode.id} (${episode.actorId}.${episode.expectationId}) failed as ${errorClass}: ${detail.split('\n')[0]}`);
    }
    this.telemetry.emit(event, { ...this.describe(episode), errorClass });
  }

  private abandon(episode: EpisodeRow, reason: string): void {
    this.logger.warn(`episode ${episode.id} aborted, writing nothing more: ${reason}`);
    this.telemetry.emit('episode.aborted', { ...this.describe(episode), reason });
  }

  private describe(episode: EpisodeRow) {
    return { episodeId: episode.id, actorId: episode.actorId, expectationId: episode.expectationId };
  }

  private lifecycle(type: LifecycleEventType, episode: EpisodeRow, status: EpisodeStatus, extra = {}) {
    return lifecycleEvent(type, episode, status, this.identity.name(), extra);
  }
}

function classify(cause: unknown): [Extract<EpisodeStatus, 'failed' | 'canceled'>, string, string] {
  if (cause instanceof EpisodeCanceledError) return ['canceled', 'canceled', cause.message];
  if (cause instanceof BudgetExceededError) return ['failed', 'budget_exceeded', cause.message];
  if (cause instanceof NondeterministicResumeError) return ['failed', 'nondeterministic_resume', cause.message];
  if (cause instanceof Error) {
    const errorClass = (cause as Error & { errorClass?: string }).errorClass ?? 'crash';
    return ['failed', errorClass, `${cause.message}\n${cause.stack ?? ''}`.trim()];
  }
  return ['failed', 'crash', String(cause)];
}
