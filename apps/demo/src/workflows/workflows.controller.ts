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
import {
  InvalidWorkflowInputError,
  Recovery,
  WorkflowDefinitionError,
  WorkflowEngine,
} from '@cyclium/nestjs';

import { StartWorkflowBody } from '../http/request-bodies.dto.js';
import { validatedBody } from '../http/validated-body.pipe.js';

/**
 * `POST /workflows/:workflowId { input, subject? }` starts a workflow (202, with the instance id);
 * `GET /workflows/:instanceId` reads an instance; `POST /workflows/:instanceId/cancel` cancels
 * it; `POST /recovery/reconcile` replays what the workflows missed, now.
 */
@Controller()
export class WorkflowsController {
  constructor(
    private readonly workflows: WorkflowEngine,
    private readonly recovery: Recovery,
  ) {}

  @Post('workflows/:workflowId')
  @HttpCode(202)
  async start(
    @Param('workflowId') workflowId: string,
    @Body(validatedBody()) { input, subject }: StartWorkflowBody,
  ) {
    try {
      return {
        instanceId: await this.workflows.start(
          workflowId,
          input,
          subject === undefined ? {} : { subject },
        ),
      };
    } catch (error) {
      if (error instanceof WorkflowDefinitionError) throw new NotFoundException(error.message);
      if (error instanceof InvalidWorkflowInputError)
        throw new BadRequestException({ statusCode: 400, message: error.message, field: 'input' });
      throw error;
    }
  }

  @Get('workflows/:instanceId')
  async get(@Param('instanceId', ParseUUIDPipe) instanceId: string) {
    const instance = await this.workflows.get(instanceId);
    if (!instance) throw new NotFoundException(`no workflow instance ${instanceId}`);
    return instance;
  }

  @Post('workflows/:instanceId/cancel')
  @HttpCode(200)
  async cancel(@Param('instanceId', ParseUUIDPipe) instanceId: string) {
    const result = await this.workflows.cancel(instanceId);
    if (result === 'not_found') throw new NotFoundException(`no workflow instance ${instanceId}`);
    return { result };
  }

  @Post('recovery/reconcile')
  @HttpCode(200)
  reconcile() {
    return this.recovery.reconcileWorkflows();
  }
}
