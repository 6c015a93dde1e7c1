import type { Logger } from '@nestjs/common';
import type { ClaimHold } from '../claims/claim-hold.js';
import { claimKeyOf } from '../claims/claim-keys.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { WorkClaims } from '../leases/work-claims.service.js';
import { episodeLabel, logStartFailure } from '../episodes/episode-log-lines.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { EpisodeRunner } from '../episodes/episode-runner.service.js';
import type { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredActor } from '../actors/registered-actor.js';
import type { SlotRuns } from './slot-runs.interface.js';

/** A restart recovery handed to this node, waiting for a slot with its claim renewed meanwhile. */
export interface WaitingRestart {
  episode: EpisodeRow;
  grant: AcquireResult;
  hold: ClaimHold;
}

/**
 * The restarts recovery hands over with their claims: each claim is held (and renewed) from the
 * moment it arrives, so every peer finds it busy while it waits for a slot, and given up when its
 * restart cannot start here.
 */
export class RestartHandover {
  constructor(
    private readonly registry: ActorRegistry,
    private readonly claims: WorkClaims,
    private readonly runner: EpisodeRunner,
    private readonly slots: SlotRuns,
    private readonly logger: Logger,
  ) {}

  /**
   * The restart with its claim held, and its actor; undefined (the claim let go) when this node
   * does not host the expectation.
   */
  take(
    episode: EpisodeRow,
    grant: AcquireResult,
  ): { actor: RegisteredActor; waiting: WaitingRestart } | undefined {
    const actor = this.registry.get(episode.actorId);
    const hold = this.claims.hold(claimKeyOf(episode), grant);
    if (!actor?.expectations.has(episode.expectationId)) {
      // Recovery only hands over expectations this node hosts: anything else is let go.
      hold.release();
      return undefined;
    }
    return { actor, waiting: { episode, grant, hold } };
  }

  /**
   * Starts a waiting restart in the slot reserved for it; one that does not start gives its claim
   * and its slot back.
   */
  async start(actor: RegisteredActor, waiting: WaitingRestart): Promise<void> {
    try {
      const episode = await this.slots.starting(
        this.runner.startResumed(waiting.episode, waiting.grant),
      );
      if (episode)
        return this.slots.launch(actor, episode, waiting.grant, {
          resumed: true,
          takenOver: true,
          hold: waiting.hold,
        });
      waiting.hold.release();
    } catch (error) {
      logStartFailure(this.logger, `recovered ${episodeLabel(waiting.episode)}`, error);
      waiting.hold.release();
    }
    this.slots.release(actor);
  }
}
