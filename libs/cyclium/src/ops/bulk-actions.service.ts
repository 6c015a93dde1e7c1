import { Injectable, Logger } from '@nestjs/common';
import { Episodes } from '../dispatch/episodes.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import { byAnOperator, firstLine } from '../episodes/episode-log-lines.js';
import { errorMessage, holdsWork } from '../sql/database-errors.js';
import { matchingEpisodes } from './matching-episodes.js';
import {
  CANCELABLE_STATUSES,
  RETRYABLE_STATUSES,
  type CancelMatchingBody,
  type RetryMatchingBody,
} from './ops-queries.dto.js';
import { OperatorActions, retryRefusal } from './operator-actions.service.js';
import { OpsScope } from './ops-scope.service.js';

/** How many matching episodes one call acts on when the body names no `limit`. */
export const DEFAULT_BULK_LIMIT = 100;

/**
 * Episodes acted on at once: a few, so a call of 500 ends in reasonable time while the node's pool
 * keeps connections for its own work.
 */
const BULK_CONCURRENCY = 4;

/** An episode a bulk action matched but did not change, and why (`reason`: a result code). */
export interface BulkRefusal {
  id: string;
  reason: string;
  message: string;
}

/**
 * The answer of a bulk action: how many episodes it matched and acted on (at most `limit`), how
 * many of them ended each way (every key present), those refused, and whether more match.
 */
export interface BulkResult<Done extends string> {
  matched: number;
  done: Record<Done, number>;
  refused: BulkRefusal[];
  more: boolean;
}

type Outcome<Done extends string> = { done: Done } | { refused: string; message: string };

/**
 * Retry or cancel the episodes that match a filter, newest first, up to a limit, each as its
 * single route would (OperatorActions). An episode refused (its actor not hosted here, tampered,
 * its status changed meanwhile) is reported and the rest go on; an error that holds work (the
 * database away, a timeout) stops the call once the actions under way end: each one done is
 * logged, and calling again acts on what still matches.
 */
@Injectable()
export class OpsBulkActions {
  private readonly logger = new Logger('CycliumOps');

  constructor(
    private readonly episodes: Episodes,
    private readonly actions: OperatorActions,
    private readonly scope: OpsScope,
  ) {}

  retryMatching(body: RetryMatchingBody): Promise<BulkResult<'resumed' | 'retried'>> {
    return this.actOnMatching(
      'retry-matching',
      body,
      body.status ? [body.status] : RETRYABLE_STATUSES,
      ['resumed', 'retried'],
      async (id) => {
        const result = await this.actions.retry(id, body.reason);
        if (result.status === 'resumed' || result.status === 'retried')
          return { done: result.status };
        return { refused: result.status, message: retryRefusal(id, result) };
      },
    );
  }

  cancelMatching(body: CancelMatchingBody): Promise<BulkResult<'canceled' | 'requested'>> {
    return this.actOnMatching(
      'cancel-matching',
      body,
      body.status ? [body.status] : CANCELABLE_STATUSES,
      ['canceled', 'requested'],
      async (id) => {
        const result = await this.actions.cancel(id, body.reason);
        if (result === 'canceled' || result === 'requested') return { done: result };
        return {
          refused: result,
          message: result === 'finished' ? `episode ${id} has ended` : `no episode ${id}`,
        };
      },
    );
  }

  private async actOnMatching<Done extends string>(
    action: string,
    body: RetryMatchingBody | CancelMatchingBody,
    statuses: readonly EpisodeStatus[],
    kinds: readonly Done[],
    act: (id: string) => Promise<Outcome<Done>>,
  ): Promise<BulkResult<Done>> {
    const asked = {
      actorId: body.actor,
      sourceStack: body.stack,
      sourceEnv: body.env,
      eventId: body.eventId,
    };
    // The log line says what the operator asked; the module's scope pins what it may reach.
    const filters = { ...asked, ...this.scope.filters(body) };
    const { items, more } = await matchingEpisodes(
      this.episodes,
      filters,
      statuses,
      body.limit ?? DEFAULT_BULK_LIMIT,
    );
    const done = Object.fromEntries(kinds.map((kind) => [kind, 0])) as Record<Done, number>;
    const refused: BulkRefusal[] = [];
    await eachAtMost(BULK_CONCURRENCY, items, async ({ id }) => {
      let outcome: Outcome<Done>;
      try {
        outcome = await act(id);
      } catch (error) {
        if (holdsWork(error)) throw error;
        // This episode's own fault (its data, a bug it meets): the others still go on. Its words
        // stay in the node's log, as the API's 500s keep theirs.
        this.logger.warn(`${action}: episode ${id} failed: ${firstLine(errorMessage(error))}`);
        outcome = { refused: 'error', message: 'internal error (logged on the node)' };
      }
      if ('done' in outcome) done[outcome.done] += 1;
      else refused.push({ id, reason: outcome.refused, message: outcome.message });
    });
    const counts = kinds.map((kind) => `${done[kind]} ${kind}`).join(', ');
    this.logger.log(
      `${action} ${JSON.stringify({ ...asked, statuses })} ${byAnOperator(body.reason)}: ` +
        `${items.length} matched (${counts}, ${refused.length} refused)` +
        `${more ? ', more match' : ''}`,
    );
    return { matched: items.length, done, refused, more };
  }
}

/**
 * `act` on each item, at most `width` at a time. After a failure no new item starts; the ones under
 * way end before the failure is rethrown, so none is left running after the answer.
 */
async function eachAtMost<T>(
  width: number,
  items: readonly T[],
  act: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    while (!failure && next < items.length) {
      const item = items[next++] as T;
      try {
        await act(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  if (failure) throw failure.error;
}
