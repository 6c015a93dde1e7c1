import { Injectable } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { HostedVersions } from '../cluster/hosted-versions.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { retryOptionsFor } from '../episodes/retry-policy.js';

/** The statuses in which an episode waits for a node to take it. */
const WAITS_FOR_A_NODE = new Set(['waiting', 'deferred', 'throttled', 'queued']);

/** Episodes as the operations API shows them: what each waits for, and its retry policy. */
@Injectable()
export class EpisodeViews {
  constructor(
    private readonly requests: TriggerRequests,
    private readonly versions: HostedVersions,
    private readonly registry: ActorRegistry,
  ) {}

  /**
   * Each episode with `dueAt` and `waitingFor` (start, retry, sleep, resume, wait) while it waits
   * for a trigger request, and `wait` (the row's `waiting_for`: a signal, an event and its match,
   * or children, with the deadline) while a wait holds it; null otherwise. A wait without a
   * deadline is due never: `dueAt` null. `retryAttempts`: how many attempts its retry policy
   * allows in all as this node reads it (its trigger's own, else its expectation's), null without
   * one or on a node that does not declare its expectation. An episode pinned to a version no live
   * node of its env and stack runs waits for one first: `waitingFor` is `version <v>`.
   */
  async describe<E extends EpisodeRow>(episodes: E[]) {
    const waits = await this.requests.waitsOf(
      episodes.filter((e) => e.status === 'deferred' || e.status === 'waiting').map((e) => e.id),
    );
    const pinned = episodes.some((e) => e.version && WAITS_FOR_A_NODE.has(e.status));
    const live = pinned ? await this.versions.live() : null;
    return episodes.map(({ waitingFor: wait, ...e }) => {
      const due = waits.get(e.id);
      const waiting = e.status === 'waiting' && wait ? wait : null;
      // Pinned to a version no live node of its env and stack runs: it waits for such a node,
      // whatever else it awaits.
      const stranded =
        e.version &&
        WAITS_FOR_A_NODE.has(e.status) &&
        !live?.runs(e.actorId, e.expectationId, e.version, e.sourceEnv, e.sourceStack);
      return {
        ...e,
        dueAt: due?.waitingFor === 'wait' && !waiting?.deadline ? null : (due?.dueAt ?? null),
        waitingFor: stranded ? `version ${e.version}` : (due?.waitingFor ?? null),
        wait: waiting,
        retryAttempts: this.retryAttempts(e),
      };
    });
  }

  private retryAttempts(episode: Omit<EpisodeRow, 'waitingFor'>): number | null {
    const declared = this.registry.expectation(episode.actorId, episode.expectationId);
    if (!declared) return null;
    return retryOptionsFor(episode, declared.options).options?.retry?.attempts ?? null;
  }
}
