import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import {
  Actor,
  Expectation,
  Findings,
  type CatchUp,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';

/** Once a minute, summarises the open limit breaches into an `advisor.summary` output. */
@Injectable()
@Actor({ id: 'resource_advisor', maxConcurrentEpisodes: 1 })
export class ResourceAdvisorActor {
  constructor(private readonly findings: Findings) {}

  /**
   * Once a minute by default, skipping the minutes a whole-cluster stop missed; the tests shorten it
   * with DEMO_ADVISOR_EVERY and pick a catch-up with DEMO_ADVISOR_CATCH_UP (read when the class loads).
   */
  @Expectation({
    id: 'summarize',
    trigger: {
      every: process.env.DEMO_ADVISOR_EVERY ?? '1m',
      catchUp: (process.env.DEMO_ADVISOR_CATCH_UP as CatchUp | undefined) ?? 'none',
    },
    recoveryPolicy: 'restart',
  })
  async summarize(ep: EpisodeContext): Promise<Convergence> {
    const breaches = await ep.step('read_breaches', async () =>
      (await this.findings.activeFor({ class: 'limit_breach' })).map((f) => ({
        subject: f.subject,
        severity: f.severity,
      })),
    );
    const summary =
      breaches.length === 0
        ? 'all resources within limits'
        : `${breaches.length} resource(s) over limit`;
    return {
      summary,
      outputs: [
        { type: 'advisor.summary', payload: { at: ep.trigger.scheduledAt, summary, breaches } },
      ],
    };
  }

  /**
   * The `resource_review` workflow's second step: advice for one resource from its check. `draftMs`
   * makes the drafting step take that long (the deploy test stops a node in the middle of it).
   */
  @Expectation({ id: 'advise', trigger: 'workflow', recoveryPolicy: 'restart' })
  async advise(ep: EpisodeContext<AdviseInput>): Promise<Convergence> {
    const { resource, breached, usage, limit, draftMs = 0 } = ep.trigger.payload;
    const open = await ep.step('read_finding', async () =>
      (await this.findings.activeFor({ class: 'limit_breach' })).some(
        (f) => f.subject === resource,
      ),
    );
    const advice = await ep.step('draft', async ({ signal }) => {
      if (draftMs > 0) await sleep(draftMs, undefined, { signal }).catch(() => undefined);
      return breached
        ? `raise the limit of ${resource} above ${limit}% or shed load (at ${usage}%)`
        : `${resource} is fine at ${usage}%`;
    });
    return { summary: advice, classification: { resource, breached, findingOpen: open } };
  }
}

export interface AdviseInput {
  resource: string;
  breached: boolean;
  usage: number;
  limit: number;
  draftMs?: number;
}
