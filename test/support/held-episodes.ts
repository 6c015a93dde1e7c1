import type { INestApplicationContext } from '@nestjs/common';
import { Episodes, WorkClaims, type EpisodeRow } from '@cyclium/nestjs';

export interface HeldEpisode {
  episode: EpisodeRow;
  ownership: { key: string; owner: string; fence: number };
}

/** `n` running episodes (actor `batch`), each with a claim the node `owner` of `app` holds at fence 1. */
export async function heldEpisodes(
  app: INestApplicationContext,
  owner: string,
  n: number,
): Promise<HeldEpisode[]> {
  const claims = app.get(WorkClaims);
  return Promise.all(
    Array.from({ length: n }, async () => {
      const episode = await app.get(Episodes).create({ actorId: 'batch', expectationId: 'x' });
      const key = `episode:${episode.id}`;
      const grant = await claims.acquire(key);
      if (grant.status !== 'acquired') throw new Error(`claim ${key} was ${grant.status}`);
      return { episode, ownership: { key, owner, fence: grant.claim.fence } };
    }),
  );
}
