import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  NotFoundException,
  Param,
  ParseUUIDPipe,
  Post,
} from '@nestjs/common';
import { ActorDefinitionError, Episodes, InvalidTriggerError } from '@cyclium/nestjs';

import { MAX_DELAY_MS, TriggerBody } from '../http/request-bodies.dto.js';
import { validatedBody } from '../http/validated-body.pipe.js';

/**
 * `POST /actors/:actorId/:expectationId { payload?, dedupeKey?, delayMs?, runAt? }` runs an expectation on the node
 * that receives the request (unlike `POST /events`, where any node may win), so a test can choose
 * which node holds the episode (or, with `delayMs` or `runAt`, defers it to whichever node is up
 * when it is due; `notBefore` in the answer). `GET /episodes/:id[/steps]` reads it back from any node.
 */
@Controller()
export class EpisodesController {
  constructor(private readonly episodes: Episodes) {}

  @Post('actors/:actorId/:expectationId')
  @HttpCode(202)
  async trigger(
    @Param('actorId') actorId: string,
    @Param('expectationId') expectationId: string,
    @Body(validatedBody()) { payload, dedupeKey, delayMs, runAt }: TriggerBody,
  ) {
    const at = runAt === undefined ? undefined : runAtOf(runAt);
    try {
      const result = await this.episodes.trigger(actorId, expectationId, payload ?? {}, {
        dedupeKey,
        delayMs,
        runAt: at,
      });
      return {
        status: result.status,
        episodeId: 'episode' in result ? result.episode.id : null,
        ...(result.status === 'deferred' && { notBefore: result.notBefore }),
      };
    } catch (error) {
      // Also thrown when this node's mode cannot run episodes: either way, nothing here can serve it.
      if (error instanceof ActorDefinitionError) throw new NotFoundException(error.message);
      if (error instanceof InvalidTriggerError)
        throw new BadRequestException({
          statusCode: 400,
          message: error.message,
          field: error.field,
        });
      throw error;
    }
  }

  @Get('episodes/:id')
  async get(@Param('id', ParseUUIDPipe) id: string) {
    const episode = await this.episodes.get(id);
    if (!episode) throw new NotFoundException(`no episode ${id}`);
    return episode;
  }

  @Get('episodes/:id/steps')
  async steps(@Param('id', ParseUUIDPipe) id: string) {
    // An episode's journal may be empty; an unknown id is not an empty journal.
    if (!(await this.episodes.get(id))) throw new NotFoundException(`no episode ${id}`);
    return this.episodes.steps(id);
  }
}

/**
 * `runAt` as a date, from now up to a year ahead: a time already past would be a run now said to
 * be deferred (send no `runAt` for that), and one decades ahead is a typing mistake.
 */
function runAtOf(runAt: string): Date {
  const at = new Date(runAt);
  const ahead = at.getTime() - Date.now();
  if (ahead < 0 || ahead > MAX_DELAY_MS)
    throw new BadRequestException({
      statusCode: 400,
      message:
        ahead < 0
          ? 'runAt must not be in the past (send no runAt to run now)'
          : 'runAt must be at most a year from now',
      field: 'runAt',
    });
  return at;
}
