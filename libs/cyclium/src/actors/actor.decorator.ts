import { DiscoveryService } from '@nestjs/core';

/** What an actor does with a new episode when every slot is busy (see `ActorOptions.overflow`). */
export type OverflowPolicy = 'queue' | 'drop' | 'shed_oldest';

/** Options of `@Actor`: its id, its concurrency and where it runs. */
export interface ActorOptions {
  id: string;
  /** Episodes of this actor running at once on one node. Default 3. */
  maxConcurrentEpisodes?: number;
  /**
   * When every slot is busy: `queue` (row status `queued`, run when a slot frees), `drop` (no row;
   * `episode.dropped` is published) or `shed_oldest` (queue up to `maxQueued`, then cancel the
   * oldest queued one). Default `queue`.
   */
  overflow?: OverflowPolicy;
  /** With `shed_oldest`: how many may wait. Default `maxConcurrentEpisodes`. */
  maxQueued?: number;
  /** Run only on nodes whose stack slug is listed. Default: every stack. */
  stacks?: string[];
}

/** Marks a provider as an actor; its `@Expectation` methods are discovered at boot. */
export const Actor = DiscoveryService.createDecorator<ActorOptions>();
