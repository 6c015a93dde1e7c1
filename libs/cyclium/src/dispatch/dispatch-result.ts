import type { SlotResult } from './actor-slots.service.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';

/**
 * What became of a trigger: started here, queued here, deferred to a full node (trigger-only
 * mode: the episode row exists, a request waits), dropped by the actor's overflow policy, a
 * duplicate of a live episode, busy (another node holds it, or this node is draining), or nothing
 * at all because the node (or the actor) is disabled.
 */
export type DispatchResult = SlotResult | { status: 'deferred'; episode: EpisodeRow; requestId: string } | { status: 'disabled' };
