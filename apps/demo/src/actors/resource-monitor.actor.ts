import { Injectable } from '@nestjs/common';
import { Actor, Expectation, type Convergence, type EpisodeContext } from '@cyclium/nestjs';

export interface ResourceUpdated {
  resource: string;
  usage: number;
  limit?: number;
}

/**
 * Watches resource usage events and keeps one `limit_breach` finding per resource up to date; also
 * the first step of the `resource_review` workflow, which passes the same payload.
 */
@Injectable()
@Actor({ id: 'resource_monitor', maxConcurrentEpisodes: 5 })
export class ResourceMonitorActor {
  @Expectation({
    id: 'check_resource_limits',
    trigger: { event: 'resource.updated' },
    recoveryPolicy: 'restart',
  })
  async checkResourceLimits(ep: EpisodeContext<ResourceUpdated>): Promise<Convergence> {
    const { resource, usage, limit = 90 } = ep.trigger.payload;
    const breached = await ep.step('evaluate', () => usage > limit);
    const key = `limit_breach:${resource}`;
    const classification = { resource, usage, limit, breached };
    if (!breached)
      return {
        findings: [{ op: 'clear', key }],
        summary: `${resource} at ${usage}% (limit ${limit}%)`,
        classification,
      };
    return {
      findings: [
        {
          op: 'raise',
          key,
          class: 'limit_breach',
          severity: usage > limit + 5 ? 'high' : 'medium',
          subject: resource,
          summary: `${resource} at ${usage}% (limit ${limit}%)`,
          evidence: { usage, limit },
        },
      ],
      summary: `${resource} breached its limit`,
      classification,
    };
  }
}
