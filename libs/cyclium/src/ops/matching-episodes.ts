import type { Episodes, ListEpisodes } from '../dispatch/episodes.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';

/** The filters of `Episodes.list` but its status, paging and limit. */
export type MatchingFilters = Omit<ListEpisodes, 'status' | 'limit' | 'cursor'>;

/** The episodes of one status, newest first, read a keyset page at a time as they are taken. */
class StatusPages {
  private buffered: EpisodeRow[] = [];
  /** Undefined before the first page; null once the last one was read. */
  private cursor: string | null | undefined;

  constructor(
    private readonly episodes: Episodes,
    private readonly query: ListEpisodes,
  ) {}

  async head(): Promise<EpisodeRow | undefined> {
    if (this.buffered.length === 0 && this.cursor !== null) {
      const page = await this.episodes.list({ ...this.query, cursor: this.cursor });
      this.buffered = page.items;
      this.cursor = page.nextCursor;
    }
    return this.buffered[0];
  }

  take(): void {
    this.buffered.shift();
  }

  /** Without another read: a page came with a cursor only when a row lay beyond it. */
  hasMore(): boolean {
    return this.buffered.length > 0 || typeof this.cursor === 'string';
  }
}

/**
 * The newest `limit` episodes that match the filters and have one of `statuses`, and whether more
 * match. `Episodes.list` filters by one status, and reading every status instead would walk the
 * finished episodes too (most of the table): each status is paged on its own (indexes on the
 * episodes table lead with the status) and the pages are merged newest first.
 */
export async function matchingEpisodes(
  episodes: Episodes,
  filters: MatchingFilters,
  statuses: readonly EpisodeStatus[],
  limit: number,
): Promise<{ items: EpisodeRow[]; more: boolean }> {
  const pages = statuses.map(
    (status) => new StatusPages(episodes, { ...filters, status, limit: Math.min(limit, 500) }),
  );
  const items: EpisodeRow[] = [];
  while (items.length < limit) {
    let newest: { pages: StatusPages; episode: EpisodeRow } | undefined;
    // One status at a time: a bulk action leaves the pool's other connections to the node's work.
    for (const source of pages) {
      const episode = await source.head();
      if (episode && (!newest || isNewer(episode, newest.episode)))
        newest = { pages: source, episode };
    }
    if (!newest) return { items, more: false };
    items.push(newest.episode);
    newest.pages.take();
  }
  return { items, more: pages.some((source) => source.hasMore()) };
}

/** The list's own order: inserted_at, then id (a uuid compares as its lowercase text does). */
function isNewer(a: EpisodeRow, b: EpisodeRow): boolean {
  const at = a.insertedAt.getTime() - b.insertedAt.getTime();
  return at !== 0 ? at > 0 : a.id > b.id;
}
