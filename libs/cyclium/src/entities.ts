import { CycliumActorDefinition } from './actors/actor-definition.entity.js';
import { CycliumBusPosition } from './bus/bus-position.entity.js';
import { CycliumEvent } from './bus/event.entity.js';
import { CycliumWorkClaim } from './claims/work-claim.entity.js';
import { CycliumTriggerRequest } from './dispatch/trigger-request.entity.js';
import { CycliumEpisodeCheckpoint } from './episodes/episode-checkpoint.entity.js';
import { CycliumEpisodeStep } from './episodes/episode-step.entity.js';
import { CycliumEpisode } from './episodes/episode.entity.js';
import { CycliumFinding } from './findings/finding.entity.js';
import { CycliumNode } from './identity/node.entity.js';
import { CycliumOutput } from './outputs/output.entity.js';
import { CycliumWorkflowInstance } from './workflows/workflow-instance.entity.js';

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
