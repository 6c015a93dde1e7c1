import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { RunOptions } from '../episodes/episode-runner.service.js';
import type { RegisteredActor } from '../actors/registered-actor.js';

/**
 * What ActorSlots lends the queue pump and the restart handover: the actor's limit stays in one
 * place, and every start they make counts for the drain like any other.
 */
export interface SlotRuns {
  /** Slots of the actor free now (none once the node drains). */
  free(actorId: string): number;
  /** Takes one of the actor's slots; the caller checked that one is free. */
  reserve(actorId: string): void;
  /**
   * Gives `count` slots (one by default) back without filling them: the caller fills them once its
   * own look is over.
   */
  unreserve(actorId: string, count?: number): void;
  /** Gives a slot back and fills the free slots again. */
  release(actor: RegisteredActor): void;
  /**
   * Fills the actor's free slots: waiting restarts first, then this node's queue, then what peers
   * offered.
   */
  pump(actor: RegisteredActor): void;
  /** This node may have queued episodes of `actorId` in the table: fills a free slot with one. */
  noteQueued(actorId: string): void;
  /** `start`, counted for the drain until it settles. */
  starting<T>(start: Promise<T>): Promise<T>;
  /** Runs a begun episode in the slot reserved for it, which frees when the run ends. */
  launch(actor: RegisteredActor, episode: EpisodeRow, grant: AcquireResult, run?: RunOptions): void;
}
