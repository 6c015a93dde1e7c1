import {
  BadRequestException,
  Body,
  ConflictException,
  Controller,
  Get,
  HttpCode,
  Logger,
  NotFoundException,
  Param,
  Post,
  Query,
  Res,
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import { Episodes, type CancelResult } from '../dispatch/episodes.service.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { Findings } from '../findings/findings.service.js';
import { Outputs } from '../outputs/outputs.service.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { InvalidTriggerError } from '../episodes/episode-errors.js';
import { byAnOperator } from '../episodes/episode-log-lines.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import { OpsBulkActions, type BulkResult } from './bulk-actions.service.js';
import {
  CancelMatchingBody,
  EpisodeIdParam,
  EpisodeListQuery,
  OperatorActionBody,
  RetryMatchingBody,
  StartEpisodeBody,
  SignalBody,
} from './ops-queries.dto.js';
import { opsValidation } from './ops-validation.js';
import { withPayloadPreview } from './payload-preview.js';
import { OpsScope } from './ops-scope.service.js';
import { EpisodeViews } from './episode-views.service.js';
import { OperatorActions, retryRefusal } from './operator-actions.service.js';

/**
 * Episodes for the operations page: list, read one with everything it wrote, cancel, retry,
 * archive; and retry or cancel every episode a filter matches.
 *
 * Cancel, retry and archive take an optional JSON body `{ reason }` (1 to 500 characters), logged
 * (context `CycliumOps`, or `CycliumDispatch` for a retry) with the episode's id.
 *
 * `POST retry-matching` and `POST cancel-matching` take the list's filters as a JSON body,
 * `{ actor?, status?, stack?, env?, eventId?, limit?, reason? }` (each left out, never null, when
 * unused; `limit` a whole number from 1 to 500, default 100), and act on the newest `limit`
 * matching episodes as the single routes would, a few at a time. `status` may name only what the
 * action can act on (else 400): `failed` or `partially_failed` for a retry (both when left out);
 * `queued`, `throttled`, `deferred`, `waiting`, `running` or `blocked` for a cancel (all of them
 * when left out). The answer, 200:
 *
 * ```json
 * { "matched": 3, "done": { "resumed": 2, "retried": 0 },
 *   "refused": [{ "id": "…", "reason": "not_hosted", "message": "the actor of episode …" }],
 *   "more": true }
 * ```
 *
 * `matched`: the episodes acted on (at most `limit`); `done` counts each result, every key present
 * (`resumed` and `retried` for a retry, `canceled` and `requested` for a cancel); `refused`: those
 * left as they were, with the single route's result code (a retry's `not_found`, `not_failed`,
 * `tampered`, `not_hosted`, `disabled`; a cancel's `finished`, `not_found`; `error` for a fault of
 * that episode alone) and its words; `more`: more episodes matched beyond `limit` (call again).
 * A database that is away stops the call with a 503: each action done is logged, and a second
 * call acts on what still matches.
 */
@Controller('api/episodes')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsEpisodesController {
  private readonly logger = new Logger('CycliumOps');

  constructor(
    private readonly episodes: Episodes,
    private readonly findings: Findings,
    private readonly outputs: Outputs,
    private readonly requests: TriggerRequests,
    private readonly views: EpisodeViews,
    private readonly actions: OperatorActions,
    private readonly bulk: OpsBulkActions,
    private readonly scope: OpsScope,
  ) {}

  @Get()
  async list(@Query() query: EpisodeListQuery) {
    const page = await this.episodes.list({
      actorId: query.actor,
      status: query.status,
      ...this.scope.filters(query),
      eventId: query.eventId,
      dedupeKey: query.dedupeKey,
      limit: query.limit,
      cursor: query.cursor,
    });
    return { ...page, items: (await this.views.describe(page.items)).map(withPayloadPreview) };
  }

  // Declared before the `:id` routes: Express matches in declaration order, so a POST `:id` route
  // added later cannot take these paths.
  @Post('retry-matching')
  @HttpCode(200)
  retryMatching(@Body() body: RetryMatchingBody): Promise<BulkResult<'resumed' | 'retried'>> {
    return this.bulk.retryMatching(body);
  }

  /**
   * Starts an episode of an expectation this node declares, as `Episodes.trigger` would (a manual
   * trigger in this node's stack and env): 201 with what became of it; 404 for an expectation this
   * node does not declare (or cannot run in its mode), 400 naming a field the trigger refuses.
   */
  @Post('start')
  @HttpCode(201)
  async start(@Body() body: StartEpisodeBody) {
    const { actorId, expectationId, payload, dedupeKey, delayMs, reason } = body;
    const result = await this.episodes
      .trigger(actorId, expectationId, payload ?? {}, { dedupeKey, delayMs })
      .catch((error: unknown) => {
        if (error instanceof ActorDefinitionError) throw new NotFoundException(error.message);
        if (error instanceof InvalidTriggerError)
          throw new BadRequestException([`${error.field}: ${error.message}`]);
        throw error;
      });
    const episode = 'episode' in result ? result.episode : null;
    this.logger.log(
      `${actorId}.${expectationId} started ${byAnOperator(reason)}: ${result.status}` +
        (episode ? `, episode ${episode.id}` : ''),
    );
    return {
      status: result.status,
      episode: episode && { id: episode.id, status: episode.status },
      ...(result.status === 'deferred' && { notBefore: result.notBefore }),
    };
  }

  @Post('cancel-matching')
  @HttpCode(200)
  cancelMatching(@Body() body: CancelMatchingBody): Promise<BulkResult<'canceled' | 'requested'>> {
    return this.bulk.cancelMatching(body);
  }

  @Get(':id')
  async one(@Param() { id }: EpisodeIdParam) {
    const episode = await this.episodes.get(id);
    if (!episode || !this.scope.owns(episode)) throw new NotFoundException(`no episode ${id}`);
    const [steps, findings, outputs, triggerRequests] = await Promise.all([
      this.episodes.steps(id),
      this.findings.forEpisode(id),
      this.outputs.forEpisode(id),
      this.requests.forEpisode(id),
    ]);
    const [described] = await this.views.describe([episode]);
    const wait = described?.wait;
    // A children wait shows each child's status: one read for all of them.
    const children =
      wait?.kind === 'children'
        ? (await this.episodes.statusesOf(wait.children)).map(([childId, status]) => ({
            id: childId,
            status,
          }))
        : undefined;
    return {
      episode: { ...described, wait: wait && children ? { ...wait, children } : wait },
      steps,
      findings,
      outputs,
      triggerRequests,
    };
  }

  /** Sends a signal to the episode (Episodes.signal): 404 without one, 409 once it ended. */
  @Post(':id/signal')
  @HttpCode(200)
  async signal(@Param() { id }: EpisodeIdParam, @Body() body: SignalBody) {
    await this.scope.admit(id);
    const result = await this.episodes.signal(id, body.name, body.payload ?? null);
    if (result.status === 'not_found') throw new NotFoundException(`no episode ${id}`);
    if (result.status === 'finished')
      throw new ConflictException(`episode ${id} has ended: a signal would reach no wait`);
    return result;
  }

  @Post(':id/cancel')
  @HttpCode(200)
  async cancel(
    @Param() { id }: EpisodeIdParam,
    @Body() { reason }: OperatorActionBody,
  ): Promise<{ result: Exclude<CancelResult, 'not_found'> }> {
    await this.scope.admit(id);
    const result = await this.actions.cancel(id, reason);
    if (result === 'not_found') throw new NotFoundException(`no episode ${id}`);
    return { result };
  }

  /** Archives a finished episode now: its dedupe key is free at once (docs/guides/retention.md). */
  @Post(':id/archive')
  @HttpCode(200)
  async archive(
    @Param() { id }: EpisodeIdParam,
    @Body() { reason }: OperatorActionBody,
  ): Promise<{ result: 'archived' | 'already_archived' }> {
    await this.scope.admit(id);
    const result = await this.actions.archive(id, reason);
    if (result === 'not_found') throw new NotFoundException(`no episode ${id}`);
    if (result === 'live')
      throw new ConflictException(
        `episode ${id} has not finished: cancel it first, or wait for it to end`,
      );
    return { result };
  }

  /**
   * 202 when the failed episode resumes from its journal in place; 201 when it runs again as a new
   * episode (Episodes.retry).
   */
  @Post(':id/retry')
  @HttpCode(201)
  async retry(
    @Param() { id }: EpisodeIdParam,
    @Body() { reason }: OperatorActionBody,
    @Res({ passthrough: true }) response: { status(code: number): unknown },
  ) {
    await this.scope.admit(id);
    const result = await this.actions.retry(id, reason);
    switch (result.status) {
      case 'resumed':
        response.status(202);
        return {
          result: 'resumed',
          dedupeKey: result.episode.dedupeKey,
          episode: { id: result.episode.id, status: result.episode.status },
        };
      case 'retried': {
        const { dispatch, dedupeKey } = result;
        const episode =
          'episode' in dispatch
            ? { id: dispatch.episode.id, status: dispatch.episode.status }
            : null;
        return { result: 'retried', dispatch: dispatch.status, dedupeKey, episode };
      }
      case 'not_found':
        throw new NotFoundException(retryRefusal(id, result));
      default:
        throw new ConflictException(retryRefusal(id, result));
    }
  }
}
