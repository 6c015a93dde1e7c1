import { Injectable, Logger } from '@nestjs/common';
import type { RetryResult } from '../dispatch/episode-retry.service.js';
import { Episodes, type ArchiveResult, type CancelResult } from '../dispatch/episodes.service.js';
import { byAnOperator } from '../episodes/episode-log-lines.js';

/** The reasons `Episodes.retry` gives for not running an episode again. */
export type RetryRefusal = Exclude<RetryResult, { status: 'resumed' | 'retried' }>;

/**
 * What the operations API does to one episode, for its single routes and its bulk ones alike: each
 * change is logged once with the episode's id and the operator's reason, so a log search for an id
 * says who changed it and why. The reason is stored only where the act is journaled already, in
 * the `retry` marker of an episode that resumes: a running episode's cancel is recorded by its own
 * node later, and an archive or a retry as a new episode has no row to keep it in.
 */
@Injectable()
export class OperatorActions {
  private readonly logger = new Logger('CycliumOps');

  constructor(private readonly episodes: Episodes) {}

  /** Episodes.retry logs the run again itself (resumed or retried), with the reason. */
  retry(id: string, reason: string | undefined): Promise<RetryResult> {
    return this.episodes.retry(id, { reason });
  }

  async cancel(id: string, reason: string | undefined): Promise<CancelResult> {
    const result = await this.episodes.cancel(id);
    if (result === 'canceled') this.logger.log(`episode ${id} canceled ${byAnOperator(reason)}`);
    if (result === 'requested')
      this.logger.log(`episode ${id}: cancel requested ${byAnOperator(reason)}`);
    return result;
  }

  async archive(id: string, reason: string | undefined): Promise<ArchiveResult> {
    const result = await this.episodes.archive(id);
    if (result === 'archived') this.logger.log(`episode ${id} archived ${byAnOperator(reason)}`);
    return result;
  }
}

/** Why a retry was refused, in the words of the API's 409 (a vanished episode included). */
export function retryRefusal(id: string, refusal: RetryRefusal): string {
  switch (refusal.status) {
    case 'not_found':
      return `no episode ${id}`;
    case 'not_failed':
      return `episode ${id} is ${refusal.current}: only a failed episode can be retried`;
    case 'tampered':
      return (
        `episode ${id} failed as tampered: its rows are not this deployment's, and it is not ` +
        `run again`
      );
    case 'not_hosted':
      return (
        `the actor of episode ${id} is not declared on this node: retry it from a node that ` +
        `hosts it`
      );
    case 'disabled':
      return `the actor of episode ${id} is disabled on this node: switch the mode before retrying`;
  }
}
