import {
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
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import type { RegisteredWorkflow } from '../workflows/registered-workflow.js';
import { WorkflowEngine } from '../workflows/workflow-engine.service.js';
import type { WorkflowInstanceRow } from '../workflows/workflow-instance-store.js';
import { WorkflowRegistry } from '../workflows/workflow-registry.service.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import { OperatorActionBody, WorkflowIdParam, WorkflowListQuery } from './ops-queries.dto.js';
import { opsValidation } from './ops-validation.js';

/** One step of a workflow as this node declares it: who runs it, and the steps it waits for. */
export interface WorkflowStepShape {
  id: string;
  actorId: string;
  expectationId: string;
  after: string[];
}

/** A workflow instance with its definition's steps, in declaration order, for the page's graph. */
export type WorkflowInstanceDetail = WorkflowInstanceRow & {
  /** Null when this node does not declare the workflow (another deployment's). */
  definition: { id: string; steps: WorkflowStepShape[] } | null;
};

/** Workflow instances for the operations page: list, read one with its step graph, cancel. */
@Controller('api/workflows')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsWorkflowsController {
  private readonly logger = new Logger('CycliumOps');

  constructor(
    private readonly workflows: WorkflowEngine,
    private readonly registry: WorkflowRegistry,
  ) {}

  @Get()
  async list(@Query() query: WorkflowListQuery) {
    return { items: await this.workflows.list({ status: query.status, limit: query.limit }) };
  }

  @Get(':id')
  async one(@Param() { id }: WorkflowIdParam): Promise<WorkflowInstanceDetail> {
    const instance = await this.workflows.get(id);
    if (!instance) throw new NotFoundException(`no workflow instance ${id}`);
    const workflow = this.registry.get(instance.workflowId);
    return { ...instance, definition: workflow ? shapeOf(workflow) : null };
  }

  /**
   * WorkflowEngine.cancel: its waiting steps never start, its running step episodes are canceled.
   * 404 without the instance, 409 once it has ended. The reason is logged, and kept as the
   * instance's error.
   */
  @Post(':id/cancel')
  @HttpCode(200)
  async cancel(
    @Param() { id }: WorkflowIdParam,
    @Body() { reason }: OperatorActionBody,
  ): Promise<{ result: 'canceled' }> {
    const why = `canceled from the operations page${reason ? `: ${reason}` : ''}`;
    const result = await this.workflows.cancel(id, why);
    if (result === 'not_found') throw new NotFoundException(`no workflow instance ${id}`);
    if (result === 'finished')
      throw new ConflictException(`workflow instance ${id} has ended: there is nothing to cancel`);
    this.logger.log(
      `workflow instance ${id} canceled from the operations page` +
        (reason ? ` (reason: ${JSON.stringify(reason)})` : ' (no reason given)'),
    );
    return { result };
  }
}

function shapeOf(workflow: RegisteredWorkflow): { id: string; steps: WorkflowStepShape[] } {
  return {
    id: workflow.id,
    steps: [...workflow.steps.values()].map((step) => ({
      id: step.id,
      actorId: step.actorId,
      expectationId: step.expectationId,
      after: [...step.after],
    })),
  };
}
