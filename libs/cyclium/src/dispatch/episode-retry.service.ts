import { Injectable } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { isUuid } from '../sql/uuid.js';
import type { DispatchResult } from './dispatch-result.js';
import { Dispatcher } from './dispatcher.service.js';

const RETRYABLE = new Set(['failed', 'partially_failed']);
const MAX_RETRIES = 1_000;

/**
 * What `Episodes.retry` did: `retried` with the new episode's dispatch and dedupe key; or why not:
 * no such episode, not a failed one (with its status), its actor not declared on this node, or the
 * actor disabled here.
 */
export type RetryResult =
  | { status: 'retried'; dedupeKey: string; dispatch: DispatchResult }
  | { status: 'not_found' }
  | { status: 'not_failed'; current: string }
  | { status: 'not_hosted' }
  | { status: 'disabled' };

/**
 * A retry is a new episode of the same expectation and trigger, keyed by the old episode's dedupe
 * key plus `:retry:<n>`: each retry is idempotent on its own and the history keeps every attempt.
 * Its steps start over from the first; the failed episode's journal is not replayed.
 */
@Injectable()
export class EpisodeRetry {
  constructor(
    private readonly store: EpisodeStore,
    private readonly registry: ActorRegistry,
    private readonly dispatcher: Dispatcher,
  ) {}

  async retry(id: string): Promise<RetryResult> {
    const old = isUuid(id) ? await this.store.get(id) : null;
    if (!old) return { status: 'not_found' };
    if (!RETRYABLE.has(old.status)) return { status: 'not_failed', current: old.status };
    const expectation = this.registry.expectation(old.actorId, old.expectationId);
    if (!expectation) return { status: 'not_hosted' };
    const base = old.dedupeKey ?? `retry-of:${old.id}`;
    const trigger = old.triggerRef as unknown as EpisodeTrigger;
    for (let n = 1; n <= MAX_RETRIES; n++) {
      const dedupeKey = `${base}:retry:${n}`;
      const dispatch = await this.dispatcher.dispatch(expectation, trigger, { dedupeKey, sourceStack: old.sourceStack, sourceEnv: old.sourceEnv });
      if (dispatch.status === 'duplicate') continue;
      if (dispatch.status === 'disabled') return { status: 'disabled' };
      return { status: 'retried', dedupeKey, dispatch };
    }
    return { status: 'not_failed', current: `${old.status}, retried ${MAX_RETRIES} times already` };
  }
}
