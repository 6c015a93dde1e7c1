import {
  BadRequestException,
  Body,
  ConflictException,
  Controller,
  Get,
  HttpCode,
  Post,
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import { HostedVersions } from '../cluster/hosted-versions.js';
import { InvalidVersionMoveError, VersionMoves } from '../dispatch/version-moves.service.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import { MoveVersionBody } from './ops-queries.dto.js';
import { opsValidation } from './ops-validation.js';

/**
 * Versions of in-flight episodes for the operations page: which versions wait for a node, and the
 * operator's move to a version whose code accepts them (Episodes.moveVersion).
 */
@Controller('api/versions')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsVersionsController {
  constructor(
    private readonly versions: VersionMoves,
    private readonly hosted: HostedVersions,
  ) {}

  /** Per expectation and version in flight: counts by status, and whether a live node runs it. */
  @Get()
  async list() {
    return { items: await this.hosted.inFlight() };
  }

  /** Moves episodes of `from` to `to`; 409 when this node's code does not accept. */
  @Post('move')
  @HttpCode(200)
  async move(@Body() body: MoveVersionBody) {
    const result = await this.versions.move(body).catch((error: unknown) => {
      if (error instanceof InvalidVersionMoveError) throw new BadRequestException([error.message]);
      throw error;
    });
    if (result.status === 'not_accepted') throw new ConflictException(result.reason);
    return { moved: result.moved, episodeIds: result.episodeIds };
  }
}
