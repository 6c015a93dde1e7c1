export { CycliumModule } from './cyclium.module.js';
export type {
  CycliumMode,
  CycliumOptions,
  RecoveryOptions,
  RecoveryPolicy,
} from './options/cyclium-options.interface.js';
export { CycliumConfigError } from './options/cyclium-config.error.js';
export { cycliumOptionsFromEnv } from './options/options-from-env.js';
export { MissingSchemaError } from './database/missing-schema.error.js';
export { DatabaseUnavailableError, isDatabaseUnavailable } from './database/database-errors.js';

export { NodeIdentity } from './identity/node-identity.service.js';
export { DuplicateNodeIdentityError } from './identity/duplicate-node-identity.error.js';
export { StackSlug } from './scope/stack-slug.service.js';
export { Env } from './scope/env.service.js';
export { scopeKey } from './scope/scope-key.js';

export { onCyclium } from './telemetry/on-cyclium.js';
export type {
  CycliumEventBase,
  CycliumEventMap,
  CycliumEventName,
  EpisodeEvent,
  WorkClaimEvent,
} from './telemetry/telemetry.events.js';

export { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus/bus.interface.js';
export {
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
  PublishQueueFullError,
  type BusEventField,
} from './bus/bus-errors.js';
export { MAX_EVENT_ID_CHARS, MAX_EVENT_TYPE_CHARS } from './bus/event-bounds.js';
export type { DurableEvents } from './bus/durable-events.interface.js';
export type { DurableHandler, DurableSubscriptions, EventReceipt } from './bus/durable-subscriptions.interface.js';
export type { SqlExecutor } from './database/sql-executor.js';
export type { Statement } from './database/statement.js';
export type { DispatchSignals } from './bus/dispatch-signals.interface.js';
export type { BusStatus } from './bus/bus-status.interface.js';
export { CycliumStatus, type HealthOptions, type HealthReport, type LivenessReport, type ReadinessCheck, type StatusSnapshot } from './health/cyclium-status.service.js';
export { WorkClaims, type FencedStatement, type WorkClaimsAcquireOptions } from './claims/work-claims.service.js';
export { PostgresClaims } from './claims/postgres-claims.adapter.js';
export { ClaimHold } from './claims/claim-hold.js';
export { ClaimLostError, type ClaimLossReason } from './claims/claim-lost.error.js';
export type {
  AcquireOptions,
  AcquireResult,
  ClaimFragments,
  ClaimGrant,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  InTransactionClaims,
  WorkClaimsAdapter,
} from './claims/work-claims-adapter.interface.js';

export { Actor, type ActorOptions, type OverflowPolicy } from './actors/actor.decorator.js';
export { Expectation, type ExpectationOptions, type FilterValue, type Trigger } from './actors/expectation.decorator.js';
export { ActorDefinitionError } from './actors/actor-definition.error.js';
export { UnknownActorError } from './actors/unknown-actor.error.js';
export type { DispatchResult } from './dispatch/dispatch-result.js';
export { Mode, type ModeStatus } from './dispatch/mode.service.js';
export { TriggerRequests } from './dispatch/trigger-requests.service.js';
export {
  Episodes,
  type CancelResult,
  type CreateEpisode,
  type ListEpisodes,
  type TriggerOptions,
} from './episodes/episodes.service.js';
export type {
  Convergence,
  EpisodeContext,
  EpisodeRow,
  EpisodeTrigger,
  StepTools,
} from './episodes/episode-context.interface.js';
export {
  BudgetExceededError,
  EpisodeCanceledError,
  EpisodeInterruptedError,
  EpisodeWriteUnavailableError,
  InvalidListQueryError,
  InvalidTriggerError,
  NondeterministicResumeError,
  StepResultError,
} from './episodes/episode-errors.js';
export { TERMINAL_EVENTS, type LifecycleEventType, type LifecyclePayload } from './episodes/episode-events.js';
export { Findings, type FindingFilters } from './findings/findings.service.js';
export type { FindingAction } from './findings/finding-action.interface.js';
export { Outputs } from './outputs/outputs.service.js';
export { OutputAdapter } from './outputs/output-adapter.decorator.js';
export type { DeliveryContext, OutputDeliverer } from './outputs/output-adapter.interface.js';
export { DeliveryInterruptedError, DeliveryTimeoutError } from './outputs/output-errors.js';
export type { OutputProposal } from './outputs/output-proposal.interface.js';
export { Recovery, type LastSweep, type SkipReason, type SweepOptions, type SweepResult } from './recovery/recovery.service.js';
export type { ReconcileOptions, ReconcileResult } from './workflows/workflow-reconciler.service.js';
export {
  Workflow,
  WorkflowStep,
  type StepFailureAction,
  type StepFailurePolicy,
  type WorkflowOptions,
  type WorkflowStepContext,
  type WorkflowStepOptions,
  type WorkflowTrigger,
} from './workflows/workflow.decorator.js';
export { WorkflowEngine, type StartWorkflowOptions, type WorkflowCancelResult } from './workflows/workflow-engine.service.js';
export { InvalidWorkflowInputError, WorkflowDefinitionError } from './workflows/workflow-definition.error.js';
export type { StepResult, StepState, StepStatus } from './workflows/workflow-step-state.js';
export type { DrainResult } from './recovery/drainer.service.js';
export { LocalBus } from './bus/local-bus.js';
export { PostgresBus, type PostgresBusOptions } from './bus/postgres-bus.js';

export { cycliumEntities } from './entities.js';
export { CycliumEpisode, type EpisodeStatus } from './episodes/episode.entity.js';
export { CycliumEpisodeStep } from './episodes/episode-step.entity.js';
export { CycliumEpisodeCheckpoint } from './episodes/episode-checkpoint.entity.js';
export { CycliumWorkClaim, type WorkClaimState } from './claims/work-claim.entity.js';
export { CycliumFinding, type FindingStatus } from './findings/finding.entity.js';
export { CycliumOutput, type OutputStatus } from './outputs/output.entity.js';
export { CycliumTriggerRequest, type TriggerRequestStatus } from './dispatch/trigger-request.entity.js';
export { CycliumWorkflowInstance, type WorkflowInstanceStatus } from './workflows/workflow-instance.entity.js';
export { CycliumActorDefinition } from './actors/actor-definition.entity.js';
export { CycliumNode } from './identity/node.entity.js';
export { CycliumEvent } from './bus/event.entity.js';
export { CycliumBusPosition } from './bus/bus-position.entity.js';

export { cycliumMigrations } from './migrations/index.js';
