import {
  Body,
  Controller,
  Get,
  HttpCode,
  Logger,
  NotFoundException,
  Param,
  Post,
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { UnknownActorError } from '../actors/unknown-actor.error.js';
import { ActorPauses } from '../dispatch/actor-pauses.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import { ActorIdParam, OperatorActionBody } from './ops-queries.dto.js';
import { opsValidation } from './ops-validation.js';

/**
 * The actors this node declares, and pausing one across every node of this stack and env
 * (ActorPauses): its episodes stop starting anywhere, running ones finish, nothing is dropped.
 */
@Controller('api/actors')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsActorsController {
  private readonly logger = new Logger('CycliumOps');

  constructor(
    private readonly registry: ActorRegistry,
    private readonly pauses: ActorPauses,
    private readonly mode: Mode,
  ) {}

  /** Each declared actor, its expectations, its mode on this node, and its pause or null. */
  @Get()
  async list() {
    const paused = new Map((await this.pauses.list()).map((p) => [p.actorId, p]));
    const items = this.registry.all().map((actor) => ({
      actorId: actor.id,
      // What the page's start form offers: each can be started by hand (Episodes.trigger).
      expectations: [...actor.expectations.keys()],
      mode: this.mode.of(actor.id),
      paused: paused.get(actor.id) ?? null,
    }));
    return { items };
  }

  @Post(':actorId/pause')
  @HttpCode(200)
  async pause(@Param() { actorId }: ActorIdParam, @Body() { reason }: OperatorActionBody) {
    const result = await this.known(() => this.pauses.pause(actorId, { reason }));
    this.logger.log(
      `actor ${actorId} ${result === 'paused' ? 'paused cluster-wide' : 'was already paused'} by ` +
        `an operator${reason === undefined ? '' : `, reason ${JSON.stringify(reason)}`}`,
    );
    return { result };
  }

  @Post(':actorId/resume')
  @HttpCode(200)
  async resume(@Param() { actorId }: ActorIdParam, @Body() { reason }: OperatorActionBody) {
    const result = await this.known(() => this.pauses.resume(actorId));
    this.logger.log(
      `actor ${actorId} ${result === 'resumed' ? 'resumed cluster-wide' : 'was not paused'} by ` +
        `an operator${reason === undefined ? '' : `, reason ${JSON.stringify(reason)}`}`,
    );
    return { result };
  }

  private known<T>(act: () => Promise<T>): Promise<T> {
    return act().catch((error: unknown) => {
      if (error instanceof UnknownActorError) throw new NotFoundException(error.message);
      throw error;
    });
  }
}
