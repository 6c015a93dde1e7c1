import { Module, type MiddlewareConsumer, type NestModule } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { TerminusModule } from '@nestjs/terminus';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CycliumModule, cycliumOptionsFromEnv } from '@cyclium/nestjs';
import { cycliumEntities } from '@cyclium/nestjs/entities';
import { CycliumHealthIndicator } from '@cyclium/nestjs/health';
import { CycliumOpsModule } from '@cyclium/nestjs/ops';
import { AdvisorSummaryAdapter } from './actors/advisor-summary.adapter.js';
import { actorDropped } from './actors/dropped-declarations.js';
import { RebalanceReportAdapter } from './actors/rebalance-report.adapter.js';
import { ResourceAdvisorActor } from './actors/resource-advisor.actor.js';
import { ResourceMonitorActor } from './actors/resource-monitor.actor.js';
import { ResourceRebalancerActor } from './actors/resource-rebalancer.actor.js';
import { demoCycliumSettings } from './demo-settings.js';
import { EpisodesController } from './episodes/episodes.controller.js';
import { EventsController } from './events/events.controller.js';
import { MetricsController } from './metrics/metrics.controller.js';
import { HealthController } from './health/health.controller.js';
import { LOCAL_HOST_NAMES, SameSiteJsonMiddleware } from './http/same-site-json.middleware.js';
import { ModeController } from './mode/mode.controller.js';
import { NodeController } from './node/node.controller.js';
import { LoopbackOnlyGuard } from './ops/loopback-only.guard.js';
import { ResourceReviewWorkflow } from './workflows/resource-review.workflow.js';
import { WorkflowsController } from './workflows/workflows.controller.js';

/**
 * The demo's actors by id; DEMO_ACTORS (comma-separated ids, default all) picks the ones this node
 * hosts, and DEMO_DROP_ACTORS leaves some out (see dropped-declarations.ts).
 */
const ACTORS = {
  resource_monitor: ResourceMonitorActor,
  resource_advisor: ResourceAdvisorActor,
  resource_rebalancer: ResourceRebalancerActor,
};
const chosen = process.env.DEMO_ACTORS?.split(',');
const hosted = Object.entries(ACTORS).filter(
  ([id]) => (!chosen || chosen.includes(id)) && !actorDropped(id),
);
// The review workflow's steps run on the monitor and the advisor: it is declared where both are.
const reviewed = ['resource_monitor', 'resource_advisor'].every((id) =>
  hosted.some(([h]) => h === id),
);

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        entities: [...cycliumEntities],
        extra: { max: Number(process.env.DEMO_DB_POOL ?? 10) },
        // Cyclium connects it at boot: a wrong password or database fails at once in one line,
        // where TypeORM's own connect would retry ten times with a stack trace each.
        manualInitialization: true,
      }),
    }),
    ScheduleModule.forRoot(),
    // The health controller logs one short line per failed probe; Terminus's own multi-line report would repeat it.
    TerminusModule.forRoot({ logger: false }),
    CycliumModule.forRoot({
      ...demoCycliumSettings(process.env),
      ...cycliumOptionsFromEnv(process.env),
    }),
    // The operations page and its API at /ops, for this machine only: from its address, and by its
    // own names (a DNS name rebound to 127.0.0.1 would pass the address check).
    CycliumOpsModule.forRoot({
      path: 'ops',
      guard: LoopbackOnlyGuard,
      allowedHosts: LOCAL_HOST_NAMES,
    }),
  ],
  controllers: [
    HealthController,
    NodeController,
    EventsController,
    EpisodesController,
    ModeController,
    WorkflowsController,
    MetricsController,
  ],
  providers: [
    CycliumHealthIndicator,
    ...hosted.map(([, actor]) => actor),
    AdvisorSummaryAdapter,
    RebalanceReportAdapter,
    ...(reviewed ? [ResourceReviewWorkflow] : []),
  ],
})
export class AppModule implements NestModule {
  /** The routes that read and act on episodes answer this machine's own pages and tools only. */
  configure(consumer: MiddlewareConsumer): void {
    consumer
      .apply(SameSiteJsonMiddleware)
      .forRoutes(EventsController, EpisodesController, ModeController, WorkflowsController);
  }
}
