import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { RowSigner } from './integrity/row-signer.service.js';
import { ActorDefinitionsStore } from './actors/actor-definitions.store.js';
import { ActorRegistry } from './actors/actor-registry.service.js';
import { ActorExplorer } from './actors/actor.explorer.js';
import { ActorSlots } from './dispatch/actor-slots.service.js';
import { TriggerSources } from './triggers/trigger-sources.service.js';
import { TriggerPlacement } from './triggers/trigger-placement.service.js';
import { Bus } from './bus/bus.interface.js';
import { BusLifecycle, busProvider, busTransportProvider } from './providers/bus.provider.js';
import { EventOutbox } from './bus/event-outbox.service.js';
import { claimsAdapterProvider } from './providers/claims-adapter.provider.js';
import { LeaseRenewer } from './leases/lease-renewer.service.js';
import { WorkClaims } from './leases/work-claims.service.js';
import { CYCLIUM_CLOCK, CYCLIUM_OPTIONS } from './cyclium.constants.js';
import { SYSTEM_CLOCK } from './primitives/clock.js';
import { CycliumDataSource } from './database/cyclium-data-source.service.js';
import { EpisodeRunner } from './episodes/episode-runner.service.js';
import { EpisodeVersions } from './episodes/episode-versions.js';
import { EpisodeVersionMoves } from './episodes/episode-version-moves.js';
import { HostedVersions } from './cluster/hosted-versions.js';
import { VersionMoves } from './dispatch/version-moves.service.js';
import { ActorPauses } from './dispatch/actor-pauses.service.js';
import { EpisodeEndings } from './episodes/episode-endings.service.js';
import { EpisodeWaits } from './episodes/episode-waits.service.js';
import { RETRY_WAKE_UPS } from './episodes/retry-wake-ups.interface.js';
import { CANCELED_REQUESTS } from './episodes/canceled-requests.interface.js';
import { EpisodeJournal } from './episodes/episode-journal.js';
import { EpisodeStatements } from './episodes/episode-statements.js';
import { BeginWrites } from './episodes/begin-writes.js';
import { EndWrites } from './episodes/end-writes.js';
import { OwnedWrites } from './episodes/owned-writes.js';
import { StepWrites } from './episodes/step-writes.js';
import { TransactionSteps } from './episodes/transaction-steps.js';
import { CHILD_STARTER, WAIT_STEPS } from './episodes/wait-ports.interface.js';
import { ChildEpisodes } from './dispatch/child-episodes.service.js';
import { EpisodeResults } from './waits/episode-results.service.js';
import { Signals } from './waits/signals.service.js';
import { WaitSteps } from './waits/wait-steps.service.js';
import { HostTransactions } from './database/host-transactions.service.js';
import { EpisodeQueue } from './episodes/episode-queue.js';
import { QueuedBegins } from './episodes/queued-begins.js';
import { FlowAdmissions } from './episodes/flow-admissions.js';
import { FlowQuiet } from './episodes/flow-quiet.js';
import { ThrottledInserts } from './episodes/throttled-inserts.js';
import { FlowStatusReader } from './episodes/flow-status.js';
import { EpisodeRecoveryStore } from './episodes/episode-recovery-store.js';
import { EpisodeStore } from './episodes/episode-store.js';
import { EpisodeSignatures } from './episodes/episode-signatures.js';
import { Episodes } from './dispatch/episodes.service.js';
import { Findings } from './findings/findings.service.js';
import { NodeIdentity } from './identity/node-identity.service.js';
import { NodeRegistry } from './cluster/node-registry.service.js';
import { LifecycleDeclarations } from './cluster/lifecycle-declarations.service.js';
import { Peers } from './cluster/peers.service.js';
import {
  CYCLIUM_MODULE_OPTIONS,
  CycliumConfigurableModule,
} from './options/cyclium.module-definition.js';
import { resolveCycliumOptions } from './options/resolve-options.js';
import { Outputs } from './outputs/outputs.service.js';
import { OutputAdapters } from './outputs/output-adapters.service.js';
import { OutputDelivery } from './outputs/output-delivery.service.js';
import { OutputRescue } from './cluster/output-rescue.service.js';
import { OutputStore } from './outputs/output-store.js';
import { CycliumShutdown } from './recovery/cyclium-shutdown.service.js';
import { Drainer } from './recovery/drainer.service.js';
import { EpisodeTakeover } from './recovery/episode-takeover.service.js';
import { Recovery } from './recovery/recovery.service.js';
import { RecoverySweep } from './recovery/recovery-sweep.service.js';
import { Env } from './scope/env.service.js';
import { StackSlug } from './scope/stack-slug.service.js';
import { CycliumTelemetry } from './telemetry/telemetry.service.js';
import { CycliumStatus } from './health/cyclium-status.service.js';
import { ClusterStatusReader } from './health/cluster-status.service.js';
import { BusConsumers } from './health/bus-consumers.service.js';
import { FinishedHistoryReader } from './health/finished-history.service.js';
import { SweepRecords } from './cluster/sweep-records.js';
import { EpisodeRetry } from './dispatch/episode-retry.service.js';
import { CycliumMetrics } from './metrics/cyclium-metrics.service.js';
import { EpisodeTraces } from './tracing/episode-traces.service.js';
import { RUN_TRACER } from './episodes/run-tracer.interface.js';
import { DeferredRunner } from './dispatch/deferred-runner.service.js';
import { Dispatcher } from './dispatch/dispatcher.service.js';
import { Mode } from './dispatch/mode.service.js';
import { TriggerPoller } from './dispatch/trigger-poller.service.js';
import { TriggerRequests } from './dispatch/trigger-requests.service.js';
import { NotHostedEpisodes } from './recovery/not-hosted.service.js';
import { IntegrityCutover } from './recovery/integrity-cutover.service.js';
import { RecoverySchedule } from './recovery/recovery-schedule.service.js';
import { RetentionSchedule } from './retention/retention.service.js';
import { StepInputs } from './workflows/step-inputs.service.js';
import { WorkflowAdvancer } from './workflows/workflow-advancer.service.js';
import { WorkflowEngine } from './workflows/workflow-engine.service.js';
import { WorkflowInstanceStore } from './workflows/workflow-instance-store.js';
import { WorkflowReconciler } from './workflows/workflow-reconciler.service.js';
import { WorkflowRegistry } from './workflows/workflow-registry.service.js';
import { WorkflowExplorer } from './workflows/workflow.explorer.js';

/**
 * `CycliumModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`.
 * Global by default (`isGlobal: false` to opt out). Uses the host's TypeORM DataSource.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: CYCLIUM_OPTIONS,
      inject: [CYCLIUM_MODULE_OPTIONS],
      useFactory: resolveCycliumOptions,
    },
    { provide: CYCLIUM_CLOCK, useValue: SYSTEM_CLOCK },
    CycliumDataSource,
    HostTransactions,
    NodeIdentity,
    NodeRegistry,
    LifecycleDeclarations,
    Peers,
    StackSlug,
    Env,
    RowSigner,
    CycliumTelemetry,
    claimsAdapterProvider,
    LeaseRenewer,
    WorkClaims,
    busTransportProvider,
    busProvider,
    BusLifecycle,
    EventOutbox,
    ActorExplorer,
    ActorDefinitionsStore,
    ActorRegistry,
    ActorSlots,
    TriggerSources,
    TriggerPlacement,
    EpisodeSignatures,
    EpisodeStore,
    EpisodeQueue,
    QueuedBegins,
    FlowAdmissions,
    FlowQuiet,
    ThrottledInserts,
    FlowStatusReader,
    EpisodeRecoveryStore,
    EpisodeJournal,
    EpisodeStatements,
    StepWrites,
    EndWrites,
    OwnedWrites,
    TransactionSteps,
    WaitSteps,
    Signals,
    EpisodeResults,
    ChildEpisodes,
    { provide: WAIT_STEPS, useExisting: WaitSteps },
    { provide: CHILD_STARTER, useExisting: ChildEpisodes },
    BeginWrites,
    EpisodeEndings,
    EpisodeWaits,
    { provide: RETRY_WAKE_UPS, useExisting: TriggerRequests },
    { provide: CANCELED_REQUESTS, useExisting: TriggerRequests },
    EpisodeRunner,
    EpisodeVersions,
    EpisodeVersionMoves,
    HostedVersions,
    VersionMoves,
    Episodes,
    Findings,
    Outputs,
    OutputAdapters,
    OutputStore,
    OutputDelivery,
    OutputRescue,
    EpisodeTakeover,
    RecoverySweep,
    Recovery,
    NotHostedEpisodes,
    IntegrityCutover,
    RecoverySchedule,
    RetentionSchedule,
    Drainer,
    CycliumShutdown,
    CycliumStatus,
    ClusterStatusReader,
    FinishedHistoryReader,
    BusConsumers,
    SweepRecords,
    EpisodeRetry,
    CycliumMetrics,
    EpisodeTraces,
    { provide: RUN_TRACER, useExisting: EpisodeTraces },
    Mode,
    ActorPauses,
    Dispatcher,
    DeferredRunner,
    TriggerRequests,
    TriggerPoller,
    WorkflowExplorer,
    WorkflowRegistry,
    WorkflowInstanceStore,
    StepInputs,
    WorkflowAdvancer,
    WorkflowEngine,
    WorkflowReconciler,
  ],
  exports: [
    NodeIdentity,
    StackSlug,
    Env,
    WorkClaims,
    Bus,
    Episodes,
    Findings,
    Outputs,
    Recovery,
    CycliumStatus,
    BusConsumers,
    Mode,
    ActorPauses,
    TriggerRequests,
    WorkflowEngine,
    // For the operations API's flow, history, versions and workflow graphs (CycliumOpsModule).
    ActorRegistry,
    WorkflowRegistry,
    FlowStatusReader,
    FinishedHistoryReader,
    VersionMoves,
    HostedVersions,
  ],
})
export class CycliumModule extends CycliumConfigurableModule {}
