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

export { NodeIdentity } from './identity/node-identity.service.js';
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

export type { Bus, BusEvent, BusHandler, PublishOptions } from './bus/bus.interface.js';
export { WorkClaims, type WorkClaimsAcquireOptions } from './claims/work-claims.service.js';
export { PostgresClaims } from './claims/postgres-claims.adapter.js';
export { ClaimHold } from './claims/claim-hold.js';
export { ClaimLostError, type ClaimLossReason } from './claims/claim-lost.error.js';
export type {
  AcquireOptions,
  AcquireResult,
  ClaimGrant,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  WorkClaimsAdapter,
} from './claims/work-claims-adapter.interface.js';

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

export { cycliumMigrations } from './migrations/index.js';
