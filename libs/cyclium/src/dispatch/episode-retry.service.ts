import { Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { byAnOperator, episodeLabel } from '../episodes/episode-log-lines.js';
import { EpisodeSignatures } from '../episodes/episode-signatures.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { EpisodeWaits } from '../episodes/episode-waits.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { isUuid } from '../sql/uuid.js';
import { REQUEST_WAKE_EVENT } from './deferred-runner.service.js';
import type { DispatchResult } from './dispatch-result.js';
import { Dispatcher } from './dispatcher.service.js';

const RETRYABLE = new Set(['failed', 'partially_failed']);
const MAX_RETRIES = 1_000;

/**
 * What `Episodes.retry` did: `resumed` the failed episode in place (it waits `waiting`, due now);
 * `retried` as a new episode, with its dispatch and dedupe key; or why not: no such episode, not a
 * failed one (with its status), failed as `tampered` (its rows are not this deployment's), its
 * actor not declared on this node, or the actor disabled here.
 */
export type RetryResult =
  | { status: 'resumed'; episode: EpisodeRow }
  | { status: 'retried'; dedupeKey: string; dispatch: DispatchResult }
  | { status: 'not_found' }
  | { status: 'not_failed'; current: string }
  | { status: 'tampered' }
  | { status: 'not_hosted' }
  | { status: 'disabled' };

/**
 * A `failed` episode resumes from its journal, in place: same id, same dedupe key; the steps that
 * completed return their recorded results, so their side effects do not happen again
 * (EpisodeWaits.reopen). One whose journal cannot be replayed runs again as a new episode of the
 * same expectation and trigger, keyed by the old dedupe key plus `:retry:<n>` (each retry
 * idempotent on its own): a `partially_failed` episode (its method returned, so its checkpoints
 * were cleared) or an archived one.
 */
@Injectable()
export class EpisodeRetry {
  private readonly logger = new Logger('CycliumDispatch');

  constructor(
    private readonly store: EpisodeStore,
    private readonly registry: ActorRegistry,
    private readonly dispatcher: Dispatcher,
    private readonly waits: EpisodeWaits,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly signatures: EpisodeSignatures,
  ) {}

  /** `why`: the operator's reason, for the line logged as it runs again and a resume's marker. */
  async retry(id: string, why?: string): Promise<RetryResult> {
    // A sentence, not a document: cut as the operations API caps it.
    const reason = why?.slice(0, 500);
    const old = isUuid(id) ? await this.store.get(id) : null;
    if (!old) return { status: 'not_found' };
    if (!RETRYABLE.has(old.status)) return { status: 'not_failed', current: old.status };
    // A row that does not verify (the `integrity` option) is not re-signed into a run.
    if (old.errorClass === 'tampered' || !this.signatures.accepts(old))
      return { status: 'tampered' };
    const expectation = this.registry.expectation(old.actorId, old.expectationId);
    if (!expectation) return { status: 'not_hosted' };
    if (old.status === 'failed' && !old.archivedAt) {
      const resumed = await this.waits.reopen(old, reason);
      if (resumed) {
        // Every full node's poller hears it now rather than at its next poll.
        this.events.announce(REQUEST_WAKE_EVENT, { node: this.identity.name() });
        this.logger.log(
          `${episodeLabel(old)} (failed as ${old.errorClass ?? 'unknown'}) resumes from its ` +
            `journal: retried ${byAnOperator(reason)}`,
        );
        return { status: 'resumed', episode: resumed };
      }
      const now = await this.store.get(id);
      if (!now) return { status: 'not_found' };
      if (now.status !== 'failed') return { status: 'not_failed', current: now.status };
      // Archived meanwhile: its checkpoints are gone, so it runs again as a new episode.
    }
    return this.runAgain(old, expectation, reason);
  }

  private async runAgain(
    old: EpisodeRow,
    expectation: RegisteredExpectation,
    reason: string | undefined,
  ): Promise<RetryResult> {
    const base = old.dedupeKey ?? `retry-of:${old.id}`;
    const trigger = old.triggerRef as unknown as EpisodeTrigger;
    for (let n = 1; n <= MAX_RETRIES; n++) {
      const dedupeKey = `${base}:retry:${n}`;
      const dispatch = await this.dispatcher.dispatch(expectation, trigger, {
        dedupeKey,
        sourceStack: old.sourceStack,
        sourceEnv: old.sourceEnv,
      });
      if (dispatch.status === 'duplicate') continue;
      if (dispatch.status === 'disabled') return { status: 'disabled' };
      const again = 'episode' in dispatch ? ` as episode ${dispatch.episode.id}` : '';
      this.logger.log(
        `${episodeLabel(old)} (${old.status}) runs again under ${dedupeKey}${again} ` +
          `(${dispatch.status}): retried ${byAnOperator(reason)}`,
      );
      return { status: 'retried', dedupeKey, dispatch };
    }
    return { status: 'not_failed', current: `${old.status}, retried ${MAX_RETRIES} times already` };
  }
}
