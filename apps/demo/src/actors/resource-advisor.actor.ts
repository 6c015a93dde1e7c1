import { Injectable } from '@nestjs/common';
import { Actor, Expectation, Findings, type Convergence, type EpisodeContext } from '@cyclium/nestjs';

/** Once a minute, summarises the open limit breaches into an `advisor.summary` output. */
@Injectable()
@Actor({ id: 'resource_advisor', maxConcurrentEpisodes: 1 })
export class ResourceAdvisorActor {
  constructor(private readonly findings: Findings) {}

  /** Once a minute by default; the tests shorten it with DEMO_ADVISOR_EVERY (read when the class loads). */
  @Expectation({ id: 'summarize', trigger: { every: process.env.DEMO_ADVISOR_EVERY ?? '1m' }, recoveryPolicy: 'restart' })
  async summarize(ep: EpisodeContext): Promise<Convergence> {
    const breaches = await ep.step('read_breaches', async () =>
      (await this.findings.activeFor({ class: 'limit_breach' })).map((f) => ({ subject: f.subject, severity: f.severity })),
    );
    const summary = breaches.length === 0 ? 'all resources within limits' : `${breaches.length} resource(s) over limit`;
    return { summary, outputs: [{ type: 'advisor.summary', payload: { at: ep.trigger.scheduledAt, summary, breaches } }] };
  }
}
