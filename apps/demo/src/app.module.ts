import { Module } from '@nestjs/common';
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
import { ModeController } from './mode/mode.controller.js';
import { NodeController } from './node/node.controller.js';
import { LoopbackOnlyGuard } from './ops/loopback-only.guard.js';
import { ResourceReviewWorkflow } from './workflows/resource-review.workflow.js';
import { WorkflowsController } from './workflows/workflows.controller.js';

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
    CycliumModule.forRoot({ ...demoCycliumSettings(process.env), ...cycliumOptionsFromEnv(process.env) }),
    // The operations page and its API at /ops, for this machine only.
    CycliumOpsModule.forRoot({ path: 'ops', guard: LoopbackOnlyGuard }),
  ],
  controllers: [HealthController, NodeController, EventsController, EpisodesController, ModeController, WorkflowsController, MetricsController],
  providers: [
    CycliumHealthIndicator,
    // DEMO_DROP_ACTORS leaves actors out of this node (see dropped-declarations.ts).
    ...(actorDropped('resource_monitor') ? [] : [ResourceMonitorActor]),
    ...(actorDropped('resource_advisor') ? [] : [ResourceAdvisorActor]),
    AdvisorSummaryAdapter,
    ...(actorDropped('resource_rebalancer') ? [] : [ResourceRebalancerActor]),
    RebalanceReportAdapter,
    ResourceReviewWorkflow,
  ],
})
export class AppModule {}
