import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage } from '../sql/database-errors.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { episodeLabel, firstLine } from '../episodes/episode-log-lines.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { EpisodeRecoveryStore, type CandidateCursor } from '../episodes/episode-recovery-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { EpisodeTakeover } from './episode-takeover.service.js';
import { NotHostedEpisodes } from './not-hosted.service.js';
import type { SkipReason, SweepOptions, SweepResult } from './recovery-sweep.interface.js';
import { goneAfterMs } from '../options/node-liveness.js';

/**
 * How long one sweep reads and takes over: pages follow each other while they come back full, so a
 * node that finds a dead peer's whole load (thousands of runs) takes it in one sweep or a few, not
 * a page per interval; what is left past the budget waits for the next sweep, oldest first again.
 */
const SWEEP_MAX_MS = 30_000;

/**
 * Candidates taken over per transaction, and transactions at once. A commit waits for the WAL to
 * reach the disk: one per orphan, a burst of them spends the budget waiting on that; a few batches
 * at once leave the pool to its other users (the restarted runs among them).
 */
const TAKEOVER_BATCH = 25;
const BATCHES_AT_ONCE = 4;

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]] as [T, T];
  }
  return items;
}

/**
 * Runs `work` on each item, at most `width` at once, starting no new one once `more()` is false.
 * The first failure stops new starts and is thrown once the ones under way have settled.
 */
async function inParallel<T>(
  items: T[],
  width: number,
  more: () => boolean,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    while (!failure && next < items.length && more()) {
      const item = items[next++] as T;
      await work(item).catch((error: unknown) => {
        failure ??= { error };
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  if (failure) throw failure.error;
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
    const goneAfter = goneAfterMs(this.options, staleAfterMs);
    const hosted = this.registry.hostedExpectations();
    // Sweeping another stack's rows: restarts of actors hosted there go to that stack, so any row
    // may be acted on.
    const otherStack =
      options.sourceStack !== undefined && options.sourceStack !== this.options.stackSlug;
    const scope = {
      stack: options.sourceStack === undefined ? this.options.stackSlug : options.sourceStack,
      env: options.sourceEnv === undefined ? this.options.env : options.sourceEnv,
      staleAfterMs,
      goneAfterMs: goneAfter,
      claimsOn: this.claims.enabled,
      hosted: otherStack ? null : hosted,
      policyInCode: (options.resolvePolicy ?? this.options.recovery.resolvePolicy) !== undefined,
    };
    const me = this.identity.name();
    const result: SweepResult = {
      restarted: 0,
      deferred: 0,
      failed: 0,
      notHosted: 0,
      skipped: 0,
      skippedFor: {},
    };
    const skip = (reason: SkipReason) => {
      result.skipped++;
      result.skippedFor[reason] = (result.skippedFor[reason] ?? 0) + 1;
    };
    const local = new Set(this.runner.inFlight().map((r) => r.episode.id));
    const deadline = performance.now() + SWEEP_MAX_MS;

    // Every restart taken waits here for a slot with its claim held and renewed in the node's one
    // batched renewal, however many wait: a peer finds each busy, and if this node dies each
    // becomes a candidate again (`recovering`, its owner gone, its claim lapsed).
    const takeOver = async (batch: EpisodeRow[]) => {
      const outcomes = await this.takeover.recoverMany(batch, me, options, (candidate, error) =>
        this.logger.warn(
          `recovery: could not take over ${episodeLabel(candidate)}: ` +
            `${firstLine(errorMessage(error))}; the next sweep tries again`,
        ),
      );
      for (const outcome of outcomes) {
        if (outcome === 'restarted' || outcome === 'failed' || outcome === 'deferred')
          result[outcome]++;
        else skip(outcome);
      }
    };
    let after: CandidateCursor | null = null;
    do {
      const page = await this.store.candidates(scope, after);
      // Shuffled within the page, so nodes sweeping at the same time mostly reach for different
      // rows; each batch in id order, so two that meet lock their rows in the same order.
      const mine = shuffle(page.episodes.filter((e) => !local.has(e.id)));
      const batches: EpisodeRow[][] = [];
      for (let i = 0; i < mine.length; i += TAKEOVER_BATCH)
        batches.push(mine.slice(i, i + TAKEOVER_BATCH).sort((a, b) => (a.id < b.id ? -1 : 1)));
      // The database away fails every batch the same way: thrown, the schedule logs the outage
      // once.
      await inParallel(batches, BATCHES_AT_ONCE, () => performance.now() < deadline, takeOver);
      after = page.next;
    } while (after && performance.now() < deadline);

    for (const episode of shuffle(await this.store.orphanedQueued(scope, me, hosted))) {
      const adopted = await this.store.adopt(episode, me);
      if (!adopted) {
        skip('taken');
        continue;
      }
      this.logger.log(
        `recovery: adopted queued ${episodeLabel(episode)} from ` +
          `${episode.ownerNode ?? 'no node'}, which is gone: it runs here`,
      );
      this.slots.noteQueued(adopted.actorId);
      result.restarted++;
    }
    result.notHosted = await this.notHosted.sweep(scope, me, deadline);
    this.telemetry.emit('recovery.sweep', result);
    return result;
  }
}
