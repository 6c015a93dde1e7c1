/**
 * `@cyclium/nestjs`: what a host application uses — the module, the decorators, the injectable
 * services, the errors they throw, and the types of their arguments and results. Every name here
 * is listed in the API table of `docs/reference/api.md` (checked by
 * `test/types/root-exports.e2e-spec.ts`).
 * Adapter authors: `@cyclium/nestjs/adapters`; tables: `/entities`; schema: `/migrations`;
 * terminus: `/health`; tests: `/testing`.
 */
// The module and its options.
export { CycliumModule } from './cyclium.module.js';
export type {
  CycliumMode,
  CycliumOptions,
  RecoveryOptions,
  RecoveryPolicy,
  RetentionOptions,
} from './options/cyclium-options.interface.js';
export { cycliumOptionsFromEnv } from './options/options-from-env.js';
export { CycliumConfigError } from './options/cyclium-config.error.js';
export { MissingSchemaError } from './sql/missing-schema.error.js';
export { DatabaseUnavailableError, isDatabaseUnavailable } from './sql/database-errors.js';
export type { SqlExecutor } from './sql/sql-executor.js';

// The node: identity, stack and env.
export { NodeIdentity } from './identity/node-identity.service.js';
export { DuplicateNodeIdentityError } from './identity/duplicate-node-identity.error.js';
export { StackSlug } from './scope/stack-slug.service.js';
export { Env } from './scope/env.service.js';

// Telemetry.
export { onCyclium } from './telemetry/on-cyclium.js';
export type {
  CycliumEventBase,
  CycliumEventMap,
  CycliumEventName,
  EpisodeEvent,
  WorkClaimEvent,
} from './telemetry/telemetry.events.js';

// The bus.
export { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus/bus.interface.js';
export {
  EventIdConflictError,
  EventPayloadTooLargeError,
  InvalidBusEventError,
  PublishQueueFullError,
  type BusEventField,
} from './bus/bus-errors.js';

// Health.
export {
  CycliumStatus,
  type HealthOptions,
  type HealthReport,
  type LivenessReport,
  type ReadinessCheck,
  type StatusSnapshot,
} from './health/cyclium-status.service.js';
export type {
  ClusterNode,
  ClusterStatus,
  ClusterStatusOptions,
  EpisodeCount,
  NodeHealth,
} from './health/cluster-status.service.js';

// Work claims.
export { WorkClaims, type WorkClaimsAcquireOptions } from './leases/work-claims.service.js';
export type { ClaimHold } from './claims/claim-hold.js';
export { ClaimLostError, type ClaimLossReason } from './claims/claim-lost.error.js';
export type {
  AcquireResult,
  ClaimWriteResult,
  ExpiredClaim,
} from './claims/work-claims-adapter.interface.js';

// Actors and episodes.
export { Actor, type ActorOptions, type OverflowPolicy } from './actors/actor.decorator.js';
export {
  Expectation,
  type CatchUp,
  type ExpectationOptions,
  type FilterValue,
  type Trigger,
} from './actors/expectation.decorator.js';
export { ActorDefinitionError } from './discovery/actor-definition.error.js';
export { UnknownActorError } from './actors/unknown-actor.error.js';
export type { DispatchResult } from './dispatch/dispatch-result.js';
export { Mode, type ModeStatus } from './dispatch/mode.service.js';
export { ActorPauses, type ActorPause } from './dispatch/actor-pauses.service.js';
export { TriggerRequests, type PendingRequests } from './dispatch/trigger-requests.service.js';
export {
  Episodes,
  type ArchiveResult,
  type CancelResult,
  type CreateEpisode,
  type ListEpisodes,
  type TriggerInTransactionOptions,
  type TriggerOptions,
} from './dispatch/episodes.service.js';
export type { OnCommitResult } from './dispatch/deferred-runner.service.js';
export { HostTransactionError, type HostTransaction } from './transactions/host-transaction.js';
export type { RetryResult } from './dispatch/episode-retry.service.js';
export type { EpisodeStatus } from './entities/episode.entity.js';
export type {
  Convergence,
  EpisodeContext,
  EpisodeRow,
  EpisodeTrigger,
  RetryPolicy,
  StepTools,
} from './episodes/episode-context.interface.js';
export type { ConcurrencyLimit, RateLimit } from './episodes/flow-limits.js';
export {
  EpisodeWriteUnavailableError,
  InvalidListQueryError,
  InvalidTriggerError,
  StepResultError,
} from './episodes/episode-errors.js';
export type { LifecycleEventType, LifecyclePayload } from './episodes/episode-events.js';
export { ChildEpisodesFailedError, EpisodeResultTimeoutError } from './episodes/wait-errors.js';
export { PatchDeprecatedError } from './episodes/patch-errors.js';
export type { TraceContext } from './primitives/trace-context.js';
export {
  InvalidVersionMoveError,
  type MoveVersion,
  type MoveVersionResult,
} from './dispatch/version-moves.service.js';
export type {
  ChildHandle,
  ChildPending,
  ChildrenWaitResult,
  EpisodeOutcome,
  EventWaitOptions,
  EventWaitResult,
  MatchValue,
  ResultOptions,
  SignalResult,
  SignalWaitResult,
  StartChildOptions,
  WaitedEvent,
  WaitingFor,
  WaitOptions,
} from './episodes/wait.types.js';

// Findings and outputs.
export { Findings, type FindingFilters, type FindingSource } from './findings/findings.service.js';
export type { FindingAction } from './findings/finding-action.interface.js';
export { OutputAdapter } from './outputs/output-adapter.decorator.js';
export type { DeliveryContext, OutputDeliverer } from './outputs/output-adapter.interface.js';
export { DeliveryInterruptedError, DeliveryTimeoutError } from './outputs/output-errors.js';
export type { OutputProposal } from './outputs/output-proposal.interface.js';

// Recovery.
export { Recovery } from './recovery/recovery.service.js';
export type {
  LastSweep,
  SkipReason,
  SweepOptions,
  SweepResult,
} from './recovery/recovery-sweep.interface.js';
export type { ReconcileOptions, ReconcileResult } from './workflows/workflow-reconciler.service.js';

// Workflows.
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
export {
  WorkflowEngine,
  type StartWorkflowOptions,
  type WorkflowCancelResult,
} from './workflows/workflow-engine.service.js';
export {
  InvalidWorkflowInputError,
  WorkflowDefinitionError,
} from './workflows/workflow-definition.error.js';
export type { StepResult, StepState, StepStatus } from './entities/workflow-step-state.js';
