import type { QueueResult } from './queue-pump.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { TriggerDelay } from '../episodes/trigger-input.js';

/**
 * What became of a trigger: started here, queued here, deferred to a full node (trigger-only mode,
 * or a delayed run: the episode row exists, a request waits, `notBefore` its due time), dropped by
 * the actor's overflow policy, a duplicate of a live episode, busy (another node holds it, or this
 * node is draining), or nothing at all because the node (or the actor) is disabled.
 */
export type DispatchResult =
  | SlotResult
  | { status: 'deferred'; episode: EpisodeRow; requestId: string; notBefore: Date | null }
  | { status: 'disabled' };

/** What the slots did with a trigger this node runs itself. */
export type SlotResult =
  { status: 'started'; episode: EpisodeRow } | QueueResult | { status: 'busy' };

export interface DispatchOptions {
  dedupeKey: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
  /**
   * Run later: a deferred row any node hosting the actor starts when due. Undefined: the
   * expectation's `delayMs`; null: now.
   */
  delay?: TriggerDelay | null;
  /**
   * The trigger's source keeps it until it settles (a bus event: its consumer's position stays
   * behind it), so with every slot busy it may wait in memory (WaitingTriggers) instead of as a
   * queued row.
   */
  waitForSlot?: boolean;
  /**
   * Told when the trigger starts waiting in memory for a slot (TriggerPlacement passes it to a peer
   * that may have one), with `withdraw`, which ends the wait as a duplicate once another node
   * started it.
   */
  onWait?: (withdraw: () => void) => void;
  /**
   * The episode may be inserted only before this time, by the database clock
   * (NewEpisode.insertBefore).
   */
  insertBefore?: Date;
}
