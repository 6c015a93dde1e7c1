import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Bus, Episodes, Findings } from '@cyclium/nestjs';
import { createCycliumTestApp, type CycliumTestApp } from '@cyclium/nestjs/testing';
import { AdvisorSummaryAdapter } from '../apps/demo/src/actors/advisor-summary.adapter.js';
import { ResourceAdvisorActor } from '../apps/demo/src/actors/resource-advisor.actor.js';
import { ResourceMonitorActor } from '../apps/demo/src/actors/resource-monitor.actor.js';
import { freshDatabase } from './support/database.js';

/**
 * The demo's own actors, tested as a host would test its actors with the testing kit: the monitor
 * raises and clears a limit breach from bus events, and the advisor's once-a-minute summary runs
 * when the test clock passes a minute, with its output delivered.
 */
describe("the demo's actors under the testing kit", () => {
  let kit: CycliumTestApp;

  beforeAll(async () => {
    kit = await createCycliumTestApp({
      databaseUrl: await freshDatabase(),
      providers: [ResourceMonitorActor, ResourceAdvisorActor, AdvisorSummaryAdapter],
    });
  }, 60_000);

  afterAll(async () => {
    await kit?.close();
  });

  const newest = async (actorId: string) =>
    (await kit.get(Episodes).list({ actorId, limit: 1 })).items[0];

  /** Passes the next minute and returns that minute's summary episode, ended. */
  const nextSummary = async () => {
    const before = (await kit.get(Episodes).list({ actorId: 'resource_advisor' })).items.length;
    await kit.clock.advance(60_000);
    await kit.runUntilIdle();
    const summaries = (await kit.get(Episodes).list({ actorId: 'resource_advisor' })).items;
    expect(summaries).toHaveLength(before + 1);
    return kit.episodes.waitFor(summaries[0]!.id);
  };

  it('the monitor raises a breach from an event over the limit, and the advisor reports it at the next minute', async () => {
    await kit.get(Bus).publish('resource.updated', { resource: 'db-1', usage: 97 });
    await kit.runUntilIdle();
    const check = await newest('resource_monitor');
    expect(check).toMatchObject({ status: 'done', summary: 'db-1 breached its limit' });
    const breaches = await kit.get(Findings).activeFor({ class: 'limit_breach' });
    expect(breaches.map((f) => [f.subject, f.severity])).toEqual([['db-1', 'high']]);

    const summary = await nextSummary();
    expect(summary).toMatchObject({ status: 'done', summary: '1 resource(s) over limit' });
    const journal = await kit.episodes.journal(summary.id);
    expect(journal.filter((j) => j.kind === 'step')).toEqual([
      expect.objectContaining({
        name: 'read_breaches',
        result: [{ subject: 'db-1', severity: 'high' }],
      }),
    ]);
    const [output] = await kit.episodes.outputs(summary.id);
    expect(output).toMatchObject({
      type: 'advisor.summary',
      payload: { summary: '1 resource(s) over limit', breaches: [{ subject: 'db-1' }] },
    });
  }, 30_000);

  it('an event back under the limit clears the breach, and the next summary says so', async () => {
    await kit.get(Bus).publish('resource.updated', { resource: 'db-1', usage: 40 });
    await kit.runUntilIdle();
    expect(await newest('resource_monitor')).toMatchObject({
      status: 'done',
      summary: 'db-1 at 40% (limit 90%)',
    });
    expect(await kit.get(Findings).activeFor({ class: 'limit_breach' })).toEqual([]);
    expect(await nextSummary()).toMatchObject({
      status: 'done',
      summary: 'all resources within limits',
    });
  }, 30_000);
});
