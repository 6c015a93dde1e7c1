import { Injectable, type OnModuleInit } from '@nestjs/common';
import type { RegisteredWorkflow } from './registered-workflow.js';
import { WorkflowExplorer } from './workflow.explorer.js';

/** Holds the workflows the app declares, found and checked at boot by WorkflowExplorer. */
@Injectable()
export class WorkflowRegistry implements OnModuleInit {
  private readonly workflows = new Map<string, RegisteredWorkflow>();

  constructor(private readonly explorer: WorkflowExplorer) {}

  onModuleInit(): void {
    for (const workflow of this.explorer.explore()) this.workflows.set(workflow.id, workflow);
  }

  all(): RegisteredWorkflow[] {
    return [...this.workflows.values()];
  }

  get(workflowId: string): RegisteredWorkflow | undefined {
    return this.workflows.get(workflowId);
  }
}
