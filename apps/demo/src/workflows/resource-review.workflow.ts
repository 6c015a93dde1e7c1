import { Injectable } from '@nestjs/common';
import { Workflow, WorkflowStep, type WorkflowStepContext } from '@cyclium/nestjs';
import type { AdviseInput } from '../actors/resource-advisor.actor.js';
import type { ResourceUpdated } from '../actors/resource-monitor.actor.js';

export interface ResourceReview extends ResourceUpdated {
  /** How long the advice takes to draft (the deploy test stops a node mid-step). */
  draftMs?: number;
}

interface Checked {
  breached: boolean;
  usage: number;
  limit: number;
}

/**
 * Check a resource against its limit, then advise on it. One live review per resource: a second
 * `POST /workflows/resource_review` for a resource under review returns the running instance.
 */
@Injectable()
@Workflow({ id: 'resource_review', subjectKey: 'resource' })
export class ResourceReviewWorkflow {
  @WorkflowStep({ actor: 'resource_monitor', expectation: 'check_resource_limits' })
  check({ input }: WorkflowStepContext<ResourceReview>): ResourceUpdated {
    return { resource: input.resource, usage: input.usage, limit: input.limit };
  }

  @WorkflowStep({
    actor: 'resource_advisor',
    expectation: 'advise',
    after: ['check'],
    onFailure: { retry: { attempts: 3, backoffMs: 1_000 } },
  })
  advise({ input, results }: WorkflowStepContext<ResourceReview>): AdviseInput {
    const checked = results.check?.classification as Checked;
    return {
      resource: input.resource,
      breached: checked.breached,
      usage: checked.usage,
      limit: checked.limit,
      draftMs: input.draftMs,
    };
  }
}
