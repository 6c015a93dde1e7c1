/**
 * `@cyclium/nestjs/entities`: the TypeORM entities of Cyclium's tables, for hosts that query them
 * themselves (`entities: [...cycliumEntities]` in their DataSource) or name a row type.
 */
import { CycliumActorDefinition } from '../actors/actor-definition.entity.js';
import { CycliumBusPosition } from '../bus/bus-position.entity.js';
import { CycliumEvent } from '../bus/event.entity.js';
import { CycliumWorkClaim } from '../claims/work-claim.entity.js';
import { CycliumTriggerRequest } from '../dispatch/trigger-request.entity.js';
import { CycliumEpisodeCheckpoint } from '../episodes/episode-checkpoint.entity.js';
import { CycliumEpisodeStep } from '../episodes/episode-step.entity.js';
import { CycliumEpisode } from '../episodes/episode.entity.js';
import { CycliumFinding } from '../findings/finding.entity.js';
import { CycliumNode } from '../identity/node.entity.js';
import { CycliumOutput } from '../outputs/output.entity.js';
import { CycliumWorkflowInstance } from '../workflows/workflow-instance.entity.js';

/** Every Cyclium entity, for hosts that add them to their DataSource to query the tables. */
export const cycliumEntities = [
  CycliumEpisode,
  CycliumEpisodeStep,
  CycliumEpisodeCheckpoint,
  CycliumWorkClaim,
  CycliumFinding,
  CycliumOutput,
  CycliumTriggerRequest,
  CycliumWorkflowInstance,
  CycliumActorDefinition,
  CycliumNode,
  CycliumEvent,
  CycliumBusPosition,
] as const;

export { CycliumEpisode, type EpisodeStatus } from '../episodes/episode.entity.js';
export { CycliumEpisodeStep } from '../episodes/episode-step.entity.js';
export { CycliumEpisodeCheckpoint } from '../episodes/episode-checkpoint.entity.js';
export { CycliumWorkClaim, type WorkClaimState } from '../claims/work-claim.entity.js';
export { CycliumFinding, type FindingStatus } from '../findings/finding.entity.js';
export { CycliumOutput, type OutputStatus } from '../outputs/output.entity.js';
export { CycliumTriggerRequest, type TriggerRequestStatus } from '../dispatch/trigger-request.entity.js';
export { CycliumWorkflowInstance, type WorkflowInstanceStatus } from '../workflows/workflow-instance.entity.js';
export { CycliumActorDefinition } from '../actors/actor-definition.entity.js';
export { CycliumNode } from '../identity/node.entity.js';
export { CycliumEvent } from '../bus/event.entity.js';
export { CycliumBusPosition } from '../bus/bus-position.entity.js';
