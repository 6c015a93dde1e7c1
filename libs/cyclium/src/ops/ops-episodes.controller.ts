import {
  Body,
  ConflictException,
  Controller,
  Get,
  HttpCode,
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
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { HostedVersions } from '../cluster/hosted-versions.js';
import { Findings } from '../findings/findings.service.js';
import { Outputs } from '../outputs/outputs.service.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { retryOptionsFor } from '../episodes/retry-policy.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import { EpisodeIdParam, EpisodeListQuery, SignalBody } from './ops-queries.dto.js';
import { opsValidation } from './ops-validation.js';

/** The statuses in which an episode waits for a node to take it. */
const WAITS_FOR_A_NODE = new Set(['waiting', 'deferred', 'throttled', 'queued']);

/**
 * Episodes for the operations page: list, read one with everything it wrote, cancel, retry,
 * archive.
 */
@Controller('api/episodes')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsEpisodesController {
  constructor(
    private readonly episodes: Episodes,
    private readonly findings: Findings,
    private readonly outputs: Outputs,
    private readonly requests: TriggerRequests,
    private readonly versions: HostedVersions,
    private readonly registry: ActorRegistry,
  ) {}

  @Get()
  async list(@Query() query: EpisodeListQuery) {
    const page = await this.episodes.list({
      actorId: query.actor,
      status: query.status,
      sourceStack: query.stack,
      sourceEnv: query.env,
      eventId: query.eventId,
      limit: query.limit,
      cursor: query.cursor,
    });
    return { ...page, items: await this.withWaits(page.items) };
  }

  @Get(':id')
  async one(@Param() { id }: EpisodeIdParam) {
    const episode = await this.episodes.get(id);
    if (!episode) throw new NotFoundException(`no episode ${id}`);
    const [steps, findings, outputs, triggerRequests] = await Promise.all([
      this.episodes.steps(id),
      this.findings.forEpisode(id),
      this.outputs.forEpisode(id),
      this.requests.forEpisode(id),
    ]);
    const [described] = await this.withWaits([episode]);
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

  /**
   * Each episode with `dueAt` and `waitingFor` (start, retry, sleep, resume, wait) while it waits
   * for a trigger request, and `wait` (the row's `waiting_for`: a signal, an event and its match,
   * or children, with the deadline) while a wait holds it; null otherwise. A wait without a
   * deadline is due never: `dueAt` null. `retryAttempts`: how many attempts its retry policy
   * allows in all as this node reads it (its trigger's own, else its expectation's), null without
   * one or on a node that does not declare its expectation. An episode pinned to a version no live
   * node of its env and stack runs waits for one first: `waitingFor` is `version <v>`.
   */
  private async withWaits<E extends EpisodeRow>(episodes: E[]) {
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

  /** Sends a signal to the episode (Episodes.signal): 404 without one, 409 once it ended. */
  @Post(':id/signal')
  @HttpCode(200)
  async signal(@Param() { id }: EpisodeIdParam, @Body() body: SignalBody) {
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
  ): Promise<{ result: Exclude<CancelResult, 'not_found'> }> {
    const result = await this.episodes.cancel(id);
    if (result === 'not_found') throw new NotFoundException(`no episode ${id}`);
    return { result };
  }

  /** Archives a finished episode now: its dedupe key is free at once (docs/guides/retention.md). */
  @Post(':id/archive')
  @HttpCode(200)
  async archive(
    @Param() { id }: EpisodeIdParam,
  ): Promise<{ result: 'archived' | 'already_archived' }> {
    const result = await this.episodes.archive(id);
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
    @Res({ passthrough: true }) response: { status(code: number): unknown },
  ) {
    const result = await this.episodes.retry(id);
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
      case 'tampered':
        throw new ConflictException(
          `episode ${id} failed as tampered: its rows are not this deployment's, and it is not ` +
            `run again`,
        );
      case 'not_found':
        throw new NotFoundException(`no episode ${id}`);
      case 'not_failed':
        throw new ConflictException(
          `episode ${id} is ${result.current}: only a failed episode can be retried`,
        );
      case 'not_hosted':
        throw new ConflictException(
          `the actor of episode ${id} is not declared on this node: retry it from a node that ` +
            `hosts it`,
        );
      case 'disabled':
        throw new ConflictException(
          `the actor of episode ${id} is disabled on this node: switch the mode before retrying`,
        );
    }
  }
}
