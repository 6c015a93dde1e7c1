import type { CycliumEpisode } from '../entities/episode.entity.js';

/**
 * The key an episode's claim is held under: its scoped dedupe key when it has one, else its id.
 * Outputs derive their keys from it; liveClaimOnEpisode spells it in SQL.
 */
export function claimKeyOf(episode: Pick<CycliumEpisode, 'id' | 'dedupeKey'>): string {
  return episode.dedupeKey ?? `episode:${episode.id}`;
}

/** claimKeyOf in SQL, over the cyclium_episodes row aliased `row`. */
export function claimKeyOfRow(row: string): string {
  return `coalesce(${row}.dedupe_key, 'episode:' || ${row}.id)`;
}

/**
 * An episode `triggerType` started holds one of the library's own dedupe keys (an event's, a
 * schedule tick's, a workflow step's), which names one occurrence. A host's manual key may be
 * triggered again once its episode is archived, and its claim row carries the fence on across
 * those episodes. So a library key's first claim may live in its episode's row, and retention drops
 * its claim row with the episode; a manual key's claim row stays.
 */
export function isLibraryKey(triggerType: string): boolean {
  return triggerType !== 'manual';
}

/** isLibraryKey in SQL, over a `trigger_type` value. */
export function libraryKeySql(triggerType: string): string {
  return `${triggerType} <> 'manual'`;
}
