import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorDefinitionsStore } from '../actors/actor-definitions.store.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../sql/database-errors.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { EpisodeRecoveryStore, RECOVERY_PAGE, type CandidateCursor } from '../episodes/episode-recovery-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { RecoveryPolicy, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { REQUEST_WAKE_EVENT } from '../dispatch/deferred-runner.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { WorkflowReconciler, type ReconcileOptions, type ReconcileResult } from '../workflows/workflow-reconciler.service.js';
import { NotHostedEpisodes } from './not-hosted.service.js';
import { claimKeyOf } from '../claims/claim-keys.js';

/**
 * How much one sweep reads: pages follow each other while they come back full (and fewer than a
 * page of restarts were taken), up to this many candidates or this long; what is left waits for
 * the next sweep, oldest first again.
 */
const SWEEP_MAX_CANDIDATES = 5_000;
const SWEEP_MAX_MS = 30_000;

export interface SweepOptions {
  /** Default: `recovery.staleAfterMs`. */
  staleAfterMs?: number;
  /** Default: this node's stack (unset: every stack). Rows with no stack match any stack. */
  sourceStack?: string | null;
  /** Default: this node's env; matched strictly (`null` is the default env). */
  sourceEnv?: string | null;
  /** Decides the policy per episode, ahead of the expectation's `recoveryPolicy`. */
  resolvePolicy?: (episode: EpisodeRow) => RecoveryPolicy;
}

/** Why a candidate was left: a live claim holds it, another node took it first, its actor runs elsewhere, or the attempt failed. */
export type SkipReason = 'busy' | 'taken' | 'not_hosted' | 'error';

export interface SweepResult {
  restarted: number;
  /** Restarts handed to a full node as trigger requests (this node, or the actor here, is trigger-only; or another stack hosts it). */
  deferred: number;
  failed: number;
  /** Episodes of an actor no live node has declared for `recovery.notHostedGraceMs`, failed as `not_hosted`. */
  notHosted: number;
  skipped: number;
  skippedFor: Partial<Record<SkipReason, number>>;
}

export interface LastSweep {
  at: Date;
  result: SweepResult | null;
  error: string | null;
}

/** Rolls a recovery transaction back (the claim it took included) and says why. */
class Skip extends Error {
  override readonly name = 'Skip';
  constructor(readonly reason: SkipReason) {
    super(reason);
  }
}

type Outcome =
  | { kind: 'restart'; episode: EpisodeRow; grant: AcquireResult }
  | { kind: 'deferred'; episode: EpisodeRow; announce: Announce }
  | { kind: 'failed'; episode: EpisodeRow; detail: string; announce: Announce };

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]] as [T, T];
  }
  return items;
}

/**
 * Finds episodes orphaned by a crash (quiet journal) or a drain (phase `interrupted`) and takes
 * each over exactly once across the cluster. One transaction per episode takes its claim (a live
 * holder means skip), takes the row with one conditional UPDATE, and journals `resumed` — or fails
 * it as `orphaned`, per policy and `maxAttempts`. A restart keeps the claim: it is handed to this
 * node's slots with its fence and renewed while it waits, so no moment exists when a peer could
 * take it again. Only actors this node hosts are taken for a restart; a failure may be applied
 * anywhere.
 */
@Injectable()
export class Recovery {
  private readonly logger = new Logger(Recovery.name);
  private last: LastSweep | null = null;
  private lastReconciled: { at: Date; result: ReconcileResult } | null = null;
  /** Sweeps on one node run one after another, each with its own options. */
  private sweeps: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeRecoveryStore,
    private readonly journal: EpisodeJournal,
    private readonly claims: WorkClaims,
    private readonly slots: ActorSlots,
    private readonly runner: EpisodeRunner,
    private readonly registry: ActorRegistry,
    private readonly definitions: ActorDefinitionsStore,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
    private readonly mode: Mode,
    private readonly requests: TriggerRequests,
    private readonly reconciler: WorkflowReconciler,
    private readonly notHosted: NotHostedEpisodes,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Waits for a sweep or reconciliation in flight (the drain calls it, after the schedule stopped). */
  async stop(): Promise<void> {
    await this.sweeps;
  }

  /** One pass over the given scope (default: this node's). Calls on one node queue behind each other. */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    const pass = this.sweeps
      .then(() => this.sweepOnce(options))
      .then(
        (result) => {
          this.last = { at: new Date(), result, error: null };
          return result;
        },
        (error: unknown) => {
          this.last = { at: new Date(), result: null, error: errorMessage(error) };
          throw error;
        },
      );
    this.sweeps = pass.catch(() => undefined);
    return pass;
  }

  /** The last sweep this node ran: when, and how it went. */
  lastSweep(): LastSweep | null {
    return this.last;
  }

  /**
   * Re-publishes the terminal event of every step episode that finished while no workflow engine
   * heard it, for the live instances in scope (default: this node's stack, rows without one
   * included, and its env strictly) of the workflows this node declares. Steps whose episodes are
   * still under way are skipped. RecoverySchedule runs it after each sweep on nodes whose engine is on.
   */
  reconcileWorkflows(options: ReconcileOptions = {}): Promise<ReconcileResult> {
    const pass = this.sweeps.then(() => this.reconciler.reconcile(options));
    this.sweeps = pass.catch(() => undefined);
    return pass.then((result) => {
      this.lastReconciled = { at: new Date(), result };
      return result;
    });
  }

  /** The last reconciliation this node ran, if any. */
  lastReconcile(): { at: Date; result: ReconcileResult } | null {
    return this.lastReconciled;
  }

  private async sweepOnce(options: SweepOptions): Promise<SweepResult> {
    const staleAfterMs = options.staleAfterMs ?? this.options.recovery.staleAfterMs;
    // A node's liveness beat is slower than a short staleAfterMs; never call a beating node gone.
    const goneAfterMs = Math.max(staleAfterMs, 3 * this.options.nodeBeatIntervalMs);
    const hosted = this.registry.all().map((actor) => actor.id);
    // Sweeping another stack's rows: restarts of actors hosted there go to that stack, so any row may be acted on.
    const otherStack = options.sourceStack !== undefined && options.sourceStack !== this.options.stackSlug;
    const scope = {
      stack: options.sourceStack === undefined ? this.options.stackSlug : options.sourceStack,
      env: options.sourceEnv === undefined ? this.options.env : options.sourceEnv,
      staleAfterMs,
      goneAfterMs,
      claimsOn: this.claims.enabled,
      hosted: otherStack ? null : hosted,
      policyInCode: (options.resolvePolicy ?? this.options.recovery.resolvePolicy) !== undefined,
    };
    const me = this.identity.name();
    const result: SweepResult = { restarted: 0, deferred: 0, failed: 0, notHosted: 0, skipped: 0, skippedFor: {} };
    const skip = (reason: SkipReason) => {
      result.skipped++;
      result.skippedFor[reason] = (result.skippedFor[reason] ?? 0) + 1;
    };
    const local = new Set(this.runner.inFlight().map((r) => r.episode.id));
    const deadline = performance.now() + SWEEP_MAX_MS;

    // A restart waits here for a slot with its claim held: past a page of them, the rest is left to peers' sweeps.
    let after: CandidateCursor | null = null;
    let read = 0;
    do {
      const page = await this.store.candidates(scope, after);
      read += page.episodes.length;
      // Shuffled within the page, so nodes sweeping at the same time mostly reach for different rows.
      for (const candidate of shuffle(page.episodes).filter((e) => !local.has(e.id))) {
        try {
          const outcome = await this.recover(candidate, me, options);
          if (outcome === 'restarted' || outcome === 'failed' || outcome === 'deferred') result[outcome]++;
          else skip(outcome);
        } catch (error) {
          this.logger.warn(`recovery of episode ${candidate.id} failed: ${errorMessage(error)}`);
          skip('error');
        }
      }
      after = page.next;
    } while (after && result.restarted < RECOVERY_PAGE && read < SWEEP_MAX_CANDIDATES && performance.now() < deadline);

    for (const episode of shuffle(await this.store.orphanedQueued(scope, me, hosted))) {
      const adopted = await this.store.adopt(episode, me);
      if (!adopted) {
        skip('taken');
        continue;
      }
      this.logger.log(`adopted queued episode ${episode.id} (${episode.actorId}) from ${episode.ownerNode ?? 'no node'}, which is gone`);
      this.slots.noteQueued(adopted.actorId);
      result.restarted++;
    }
    result.notHosted = await this.notHosted.sweep(scope, me, deadline);
    this.telemetry.emit('recovery.sweep', result);
    return result;
  }

  private async recover(candidate: EpisodeRow, me: string, options: SweepOptions): Promise<'restarted' | 'deferred' | 'failed' | SkipReason> {
    const hosted = this.slots.hosts(candidate.actorId);
    const policy = await this.policyFor(candidate, options.resolvePolicy);
    const attempt = candidate.attempts + 1;
    const restart = policy === 'restart' && attempt <= candidate.maxAttempts;
    const mode = this.mode.of(candidate.actorId);
    // Sweeping another stack's rows: restarts of actors hosted there go to that stack as requests.
    const otherStack = options.sourceStack !== undefined && options.sourceStack !== this.options.stackSlug;
    const defer = restart && ((hosted && mode === 'trigger_only') || (!hosted && otherStack));
    // Otherwise only a node that hosts (and runs) the actor can run it: leave the orphan to one.
    if (restart && !defer && (!hosted || mode !== 'full')) return 'not_hosted';
    const key = claimKeyOf(candidate);
    const from = candidate.ownerNode ?? 'an unknown node';

    let outcome: Outcome;
    try {
      outcome = await this.database.transaction<Outcome>(async (client) => {
        const grant = await this.claims.acquireWithin(client, key, me, { workType: 'recovery' });
        if (grant.status === 'busy') throw new Skip('busy'); // a live holder: never recover it
        const episode = await this.store.take(client, candidate, me);
        if (!episode) throw new Skip('taken');
        if (restart) {
          await this.journal.mark([episode.id], 'resumed', { attempt, node: me, from: candidate.phase ?? 'stale', lastOwner: from }, client);
          if (!defer) return { kind: 'restart', episode, grant };
          // Waits as deferred for a full node's poller, which takes it with a claim of its own.
          if (!(await this.store.deferRestart(client, episode.id))) throw new Skip('taken');
          await this.requests.insertWithin(client, episode.id, {
            actorId: episode.actorId,
            expectationId: episode.expectationId,
            sourceNode: me,
            sourceStack: episode.sourceStack,
            sourceEnv: episode.sourceEnv,
            opts: { resume: true },
          });
          await this.claims.completeWithin(client, key, me, grant.status === 'acquired' ? grant.claim.fence : null);
          const announce = await this.events.within(client, [{ type: REQUEST_WAKE_EVENT, payload: { node: me } }]);
          return { kind: 'deferred', episode, announce };
        }
        const detail = [
          policy === 'restart' ? `orphaned: attempt ${attempt} is past max_attempts ${candidate.maxAttempts}` : 'orphaned: recovery policy is fail',
          `(last owned by ${from})`,
          hosted ? '' : `; ${candidate.actorId}.${candidate.expectationId} is not hosted on ${me}, policy from its recorded definition`,
        ]
          .join(' ')
          .trim();
        const fence = grant.status === 'acquired' ? grant.claim.fence : null;
        if (!(await this.store.failOrphaned(client, episode.id, detail))) throw new Skip('taken');
        await this.journal.mark([episode.id], 'orphaned', { node: me, lastOwner: from }, client);
        if ((await this.claims.failWithin(client, key, me, fence, detail)) !== 'ok') throw new Skip('taken');
        const announce = await this.events.within(client, [lifecycleEvent('episode.failed', episode, 'failed', me, { errorClass: 'orphaned' })]);
        return { kind: 'failed', episode, detail, announce };
      });
    } catch (error) {
      if (error instanceof Skip) return error.reason;
      throw error;
    }

    if (outcome.kind === 'deferred') {
      outcome.announce();
      this.logger.log(
        `deferred the restart of episode ${candidate.id} (${candidate.actorId}.${candidate.expectationId}) from ${from} to a full node: attempt ${attempt} of ${candidate.maxAttempts}`,
      );
      return 'deferred';
    }
    if (outcome.kind === 'failed') {
      outcome.announce();
      this.logger.warn(`episode ${outcome.episode.id} (${outcome.episode.actorId}.${outcome.episode.expectationId}) failed as ${outcome.detail}`);
      this.telemetry.emit('episode.failed', { ...this.describe(outcome.episode), errorClass: 'orphaned' });
      return 'failed';
    }
    const why = candidate.phase === 'interrupted' ? 'interrupted by a drain' : 'its journal went quiet';
    this.logger.log(
      `restarting episode ${candidate.id} (${candidate.actorId}.${candidate.expectationId}) from ${from} (${why}): attempt ${attempt} of ${candidate.maxAttempts}`,
    );
    this.slots.resume(outcome.episode, outcome.grant);
    return 'restarted';
  }

  private describe(episode: EpisodeRow) {
    return { episodeId: episode.id, actorId: episode.actorId, expectationId: episode.expectationId };
  }

  /** `resolvePolicy`, else the expectation's `recoveryPolicy`, else the actor's stored definition, else `fail`. */
  private async policyFor(episode: EpisodeRow, resolve = this.options.recovery.resolvePolicy): Promise<RecoveryPolicy> {
    if (resolve) return resolve(episode);
    const declared = this.registry.expectation(episode.actorId, episode.expectationId)?.options.recoveryPolicy;
    if (declared) return declared;
    return (await this.definitions.recordedPolicy(episode.actorId, episode.expectationId)) ?? 'fail';
  }
}
