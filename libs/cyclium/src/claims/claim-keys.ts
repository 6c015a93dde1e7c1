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
