import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { errorMessage } from '../sql/database-errors.js';
import { EpisodeInterruptedError } from '../episodes/episode-errors.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import { episodeLabel } from '../episodes/episode-log-lines.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { EpisodeRecoveryStore } from '../episodes/episode-recovery-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { claimKeyOf } from '../claims/claim-keys.js';

export interface DrainResult {
  stamped: number;
  killed: number;
}

/**
 * Rule 7, on shutdown: write first, then stop. Once every start under way has launched (so no
 * episode begun here escapes), it stamps every episode this node runs or holds for a restart
 * (a restart recovery handed over after the drain began included) `interrupted`, journals one
 * marker each and releases their claims — three statements, whatever the number — then aborts the
 * tasks and waits up to `episodeShutdownMs`. The marker goes before the release: a peer can take an
 * episode over only once its claim is free, so it reads the journal with the marker already in it
 * and never has a step of its own meet the marker at the same position. A task still mid-step
 * until the release can still checkpoint (the restart keeps that step); after it, its fenced write
 * finds the lease gone. The renewer stops renewing those claims before they are released, so a
 * clean drain reports no `renew_failed`. A statement that fails is logged and the drain goes on:
 * the rest of the shutdown must still happen. Peers restart stamped episodes at their next sweep,
 * without waiting for staleness.
 */
@Injectable()
export class Drainer {
  private readonly logger = new Logger('CycliumRecovery');
  private draining: Promise<DrainResult> | undefined;

  constructor(
    private readonly store: EpisodeRecoveryStore,
    private readonly journal: EpisodeJournal,
    private readonly runner: EpisodeRunner,
    private readonly slots: ActorSlots,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Runs once; later calls (a second SIGTERM) get the same result. */
  drain(): Promise<DrainResult> {
    this.draining ??= this.drainOnce();
    return this.draining;
  }

  private async drainOnce(): Promise<DrainResult> {
    const me = this.identity.name();
    this.slots.stopAccepting();
    await this.slots.startsSettled();
    const running = this.runner.inFlight();
    const waiting = this.slots.takeWaitingRestarts();
    const ids = [...running.map((r) => r.episode.id), ...waiting.map((w) => w.episode.id)];
    this.runner.markInterrupted(ids);

    let stamped: string[] = [];
    if (ids.length > 0) {
      stamped = await this.attempt(
        'stamp the running episodes interrupted',
        () => this.store.stampInterrupted(ids),
        [],
      );
      await this.attempt(
        'journal their interrupted markers',
        () => this.journal.mark(stamped, 'interrupted', { node: me }),
        [],
      );
      for (const episode of running) episode.stopRenewing();
      for (const restart of waiting) restart.hold.stopRenewing();
      const keys = [
        ...running.map((r) => r.claimKey),
        ...waiting.map((w) => claimKeyOf(w.episode)),
      ];
      await this.attempt('release their claims', () => this.claims.releaseAll(keys, me), 0);
    }
    this.logger.log(this.summary(running.length, waiting.length, stamped.length));
    for (const { episode } of [...running, ...waiting])
      this.logger.debug(
        `draining: ${episodeLabel(episode)} stamped interrupted; a peer restarts it`,
      );
    for (const restart of waiting) restart.hold.release();
    for (const episode of running) episode.stop(new EpisodeInterruptedError(episode.episode.id));
    for (const episode of running) {
      this.telemetry.emit('episode.interrupted', {
        episodeId: episode.episode.id,
        actorId: episode.episode.actorId,
        expectationId: episode.episode.expectationId,
      });
    }

    const window = new Promise<'timeout'>((resolve) =>
      setTimeout(() => resolve('timeout'), this.options.episodeShutdownMs).unref(),
    );
    await Promise.race([this.slots.idle(), window]);
    const killed = this.runner.inFlight().length;
    if (killed > 0)
      this.logger.warn(
        `${killed} episode(s) still mid-step after ${this.options.episodeShutdownMs} ms: left to ` +
          `be killed with the process (already stamped)`,
      );
    this.telemetry.emit('drain.completed', { stamped: stamped.length, killed });
    return { stamped: stamped.length, killed };
  }

  /** The drain's one info line: what this node gave up, so its log says where its work went. */
  private summary(running: number, waiting: number, stamped: number): string {
    if (running + waiting === 0) return 'draining: no episode was running here';
    const handed =
      `draining: ${running} running episode(s) ` +
      `interrupted${waiting > 0 ? ` and ${waiting} waiting restart(s) given back` : ''}`;
    const missed = running + waiting - stamped;
    return (
      `${handed}; peers restart them from their last ` +
      `checkpoints${missed > 0 ? ` (${missed} not stamped: they wait to go stale)` : ''}`
    );
  }

  private async attempt<T>(what: string, statement: () => Promise<T>, fallback: T): Promise<T> {
    try {
      return await statement();
    } catch (error) {
      this.logger.error(
        `drain: could not ${what}: ${errorMessage(error)}; carrying on with the shutdown`,
      );
      return fallback;
    }
  }
}
