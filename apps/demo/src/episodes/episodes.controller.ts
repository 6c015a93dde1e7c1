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

import { TriggerBody } from '../http/request-bodies.dto.js';
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
    try {
      const at = runAt === undefined ? undefined : new Date(runAt);
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
  steps(@Param('id', ParseUUIDPipe) id: string) {
    return this.episodes.steps(id);
  }
}
