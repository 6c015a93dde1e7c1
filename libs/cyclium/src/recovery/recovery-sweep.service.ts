import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage, isDatabaseUnavailable } from '../sql/database-errors.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { episodeLabel, firstLine } from '../episodes/episode-log-lines.js';
import { EpisodeRecoveryStore, RECOVERY_PAGE, type CandidateCursor } from '../episodes/episode-recovery-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { EpisodeTakeover } from './episode-takeover.service.js';
import { NotHostedEpisodes } from './not-hosted.service.js';
import type { SkipReason, SweepOptions, SweepResult } from './recovery-sweep.interface.js';

/**
 * How much one sweep reads: pages follow each other while they come back full (and fewer than a
 * page of restarts were taken), up to this many candidates or this long; what is left waits for
 * the next sweep, oldest first again.
 */
const SWEEP_MAX_CANDIDATES = 5_000;
const SWEEP_MAX_MS = 30_000;

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]] as [T, T];
  }
  return items;
}

/**
 * One sweep: finds episodes orphaned by a crash (quiet journal) or a drain (phase `interrupted`)
 * in the scope, page by page, and has EpisodeTakeover take each over; then adopts the queued rows
 * of gone nodes and fails the episodes no live node hosts (NotHostedEpisodes).
 */
@Injectable()
export class RecoverySweep {
  private readonly logger = new Logger('CycliumRecovery');

  constructor(
    private readonly store: EpisodeRecoveryStore,
    private readonly claims: WorkClaims,
    private readonly slots: ActorSlots,
    private readonly runner: EpisodeRunner,
    private readonly registry: ActorRegistry,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    private readonly takeover: EpisodeTakeover,
    private readonly notHosted: NotHostedEpisodes,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async run(options: SweepOptions): Promise<SweepResult> {
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
          const outcome = await this.takeover.recover(candidate, me, options);
          if (outcome === 'restarted' || outcome === 'failed' || outcome === 'deferred') result[outcome]++;
          else skip(outcome);
        } catch (error) {
          // The database away: every other candidate would fail the same way; the schedule logs the outage once.
          if (isDatabaseUnavailable(error)) throw error;
          this.logger.warn(`recovery: could not take over ${episodeLabel(candidate)}: ${firstLine(errorMessage(error))}; the next sweep tries again`);
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
      this.logger.log(`recovery: adopted queued ${episodeLabel(episode)} from ${episode.ownerNode ?? 'no node'}, which is gone: it runs here`);
      this.slots.noteQueued(adopted.actorId);
      result.restarted++;
    }
    result.notHosted = await this.notHosted.sweep(scope, me, deadline);
    this.telemetry.emit('recovery.sweep', result);
    return result;
  }
}
