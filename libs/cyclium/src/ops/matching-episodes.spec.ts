import { describe, expect, it } from '@jest/globals';
import type { Episodes, ListEpisodes } from '../dispatch/episodes.service.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { matchingEpisodes } from './matching-episodes.js';

/** Episodes.list over rows held here: newest first, pages of `limit`, a cursor being an offset. */
function listing(rows: Array<Pick<EpisodeRow, 'id' | 'status' | 'insertedAt'>>) {
  const reads: ListEpisodes[] = [];
  const list = (query: ListEpisodes) => {
    reads.push(query);
    const matching = rows
      .filter((row) => row.status === query.status)
      .sort((a, b) => b.insertedAt.getTime() - a.insertedAt.getTime() || (a.id < b.id ? 1 : -1));
    const from = Number(query.cursor ?? 0);
    const limit = query.limit ?? 50;
    const items = matching.slice(from, from + limit) as EpisodeRow[];
    const nextCursor = matching.length > from + limit ? String(from + limit) : null;
    return Promise.resolve({ items, nextCursor });
  };
  return { episodes: { list } as unknown as Episodes, reads };
}

const at = (second: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, second));

describe('matchingEpisodes', () => {
  const rows = [
    { id: 'a1', status: 'failed' as const, insertedAt: at(1) },
    { id: 'b2', status: 'partially_failed' as const, insertedAt: at(2) },
    { id: 'a3', status: 'failed' as const, insertedAt: at(3) },
    { id: 'a4', status: 'failed' as const, insertedAt: at(4) },
    { id: 'b5', status: 'partially_failed' as const, insertedAt: at(5) },
    { id: 'c6', status: 'done' as const, insertedAt: at(6) },
  ];

  it('merges the statuses newest first, up to the limit, and says whether more match', async () => {
    const { episodes } = listing(rows);
    const statuses = ['failed', 'partially_failed'] as const;
    const three = await matchingEpisodes(episodes, {}, statuses, 3);
    expect(three.items.map((e) => e.id)).toEqual(['b5', 'a4', 'a3']);
    expect(three.more).toBe(true);
    const all = await matchingEpisodes(episodes, {}, statuses, 5);
    expect(all.items.map((e) => e.id)).toEqual(['b5', 'a4', 'a3', 'b2', 'a1']);
    expect(all.more).toBe(false);
  });

  it('reads a status a page at a time, with the filters and its own status', async () => {
    const { episodes, reads } = listing(rows);
    const found = await matchingEpisodes(episodes, { actorId: 'x' }, ['failed'], 2);
    expect(found.items.map((e) => e.id)).toEqual(['a4', 'a3']);
    expect(found.more).toBe(true);
    // The first page's cursor says more match: no second read for that.
    expect(reads).toEqual([{ actorId: 'x', status: 'failed', limit: 2, cursor: undefined }]);
    const three = await matchingEpisodes(episodes, {}, ['failed'], 3);
    expect(three).toMatchObject({ more: false });
    expect(three.items.map((e) => e.id)).toEqual(['a4', 'a3', 'a1']);
    expect(reads.slice(1)).toEqual([{ status: 'failed', limit: 3, cursor: undefined }]);
  });

  it('finds nothing when no episode has the statuses', async () => {
    const { episodes } = listing(rows);
    expect(await matchingEpisodes(episodes, {}, ['running', 'queued'], 10)).toEqual({
      items: [],
      more: false,
    });
  });
});
