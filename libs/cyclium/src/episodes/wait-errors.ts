import type { ChildPending, EpisodeOutcome } from './wait.types.js';

/**
 * `ep.waitForChildren`: every child ended, and some failed or were canceled. `failed` lists those;
 * `children` every child's outcome. The parent may catch it and go on.
 */
export class ChildEpisodesFailedError extends Error {
  override readonly name = 'ChildEpisodesFailedError';
  constructor(
    readonly failed: readonly EpisodeOutcome[],
    readonly children: ReadonlyArray<EpisodeOutcome | ChildPending>,
  ) {
    super(
      `${failed.length} of ${children.length} child episodes did not succeed: ` +
        failed
          .slice(0, 3)
          .map((c) => `${c.episodeId} ${c.status}${c.errorClass ? ` (${c.errorClass})` : ''}`)
          .join(', ') +
        (failed.length > 3 ? ', …' : ''),
    );
  }
}

/** `Episodes.result`: the episode had not ended within `timeoutMs`. */
export class EpisodeResultTimeoutError extends Error {
  override readonly name = 'EpisodeResultTimeoutError';
  constructor(
    readonly episodeId: string,
    readonly timeoutMs: number,
  ) {
    super(`episode ${episodeId} had not ended after ${timeoutMs} ms`);
  }
}
