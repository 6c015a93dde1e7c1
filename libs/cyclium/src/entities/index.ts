/**
 * `@cyclium/nestjs/entities`: the TypeORM entities of Cyclium's tables, for hosts that query them
 * themselves (`entities: [...cycliumEntities]` in their DataSource) or name a row type.
 */
import { CycliumActorDefinition } from './actor-definition.entity.js';
import { CycliumActorScope } from './actor-scope.entity.js';
import { CycliumBusPosition } from './bus-position.entity.js';
import { CycliumEvent } from './event.entity.js';
import { CycliumWorkClaim } from './work-claim.entity.js';
import { CycliumTriggerRequest } from './trigger-request.entity.js';
import { CycliumEpisodeCheckpoint } from './episode-checkpoint.entity.js';
import { CycliumEpisodeStep } from './episode-step.entity.js';
import { CycliumEpisode } from './episode.entity.js';
import { CycliumFinding } from './finding.entity.js';
import { CycliumIntegrityCutover } from './integrity-cutover.entity.js';
import { CycliumNode } from './node.entity.js';
import { CycliumOutput } from './output.entity.js';
import { CycliumWorkflowInstance } from './workflow-instance.entity.js';
import { CycliumSignal } from './signal.entity.js';
import { CycliumEventWait, CycliumEventWaitShape } from './event-wait.entity.js';
import { CycliumFlowStart } from './flow-start.entity.js';
import { CycliumActorPause } from './actor-pause.entity.js';

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
  CycliumActorScope,
  CycliumNode,
  CycliumEvent,
  CycliumBusPosition,
  CycliumIntegrityCutover,
  CycliumSignal,
  CycliumEventWait,
  CycliumEventWaitShape,
  CycliumFlowStart,
  CycliumActorPause,
] as const;

export { CycliumEpisode, type EpisodeStatus } from './episode.entity.js';
export { CycliumEpisodeStep } from './episode-step.entity.js';
export { CycliumEpisodeCheckpoint } from './episode-checkpoint.entity.js';
export { CycliumWorkClaim, type WorkClaimState } from './work-claim.entity.js';
export { CycliumFinding, type FindingStatus } from './finding.entity.js';
export { CycliumOutput, type OutputStatus } from './output.entity.js';
export { CycliumTriggerRequest, type TriggerRequestStatus } from './trigger-request.entity.js';
export {
  CycliumWorkflowInstance,
  type WorkflowInstanceStatus,
} from './workflow-instance.entity.js';
export { CycliumActorDefinition } from './actor-definition.entity.js';
export { CycliumActorScope } from './actor-scope.entity.js';
export { CycliumNode } from './node.entity.js';
export { CycliumEvent } from './event.entity.js';
export { CycliumBusPosition } from './bus-position.entity.js';
export { CycliumIntegrityCutover } from './integrity-cutover.entity.js';
export { CycliumSignal } from './signal.entity.js';
export { CycliumFlowStart } from './flow-start.entity.js';
export { CycliumActorPause } from './actor-pause.entity.js';
export { CycliumEventWait, CycliumEventWaitShape } from './event-wait.entity.js';
export type { MatchValue, WaitingFor } from './waiting-for.js';
