import { CycliumSchema1764400000000 } from './1764400000000-cyclium-schema.js';
import { CycliumBusPayloads1764400000001 } from './1764400000001-cyclium-bus-payloads.js';
import { CycliumEvents1764400000002 } from './1764400000002-cyclium-events.js';
import { CycliumEpisodeQueue1764400000003 } from './1764400000003-cyclium-episode-queue.js';
import { CycliumTriggerOnly1764400000004 } from './1764400000004-cyclium-trigger-only.js';
import { CycliumWorkflows1764400000005 } from './1764400000005-cyclium-workflows.js';
import { CycliumNodeActors1764400000006 } from './1764400000006-cyclium-node-actors.js';
import { CycliumBusPositions1764400000007 } from './1764400000007-cyclium-bus-positions.js';
import { CycliumOutputOutbox1764400000008 } from './1764400000008-cyclium-output-outbox.js';
import { CycliumNodeBootId1764400000009 } from './1764400000009-cyclium-node-boot-id.js';
import { CycliumScopedRows1764400000010 } from './1764400000010-cyclium-scoped-rows.js';
import { CycliumRowSignatures1764400000011 } from './1764400000011-cyclium-row-signatures.js';
import { CycliumOperatorReads1764400000012 } from './1764400000012-cyclium-operator-reads.js';
import { CycliumRetention1764400000013 } from './1764400000013-cyclium-retention.js';
import { CycliumRetries1764400000014 } from './1764400000014-cyclium-retries.js';
import { CycliumDueRequests1764400000015 } from './1764400000015-cyclium-due-requests.js';
// prettier-ignore
import {
  CycliumBusPositionTypes1764400000019,
} from './1764400000019-cyclium-bus-position-types.js';
// prettier-ignore
import {
  CycliumEpisodeSignatures1764400000020,
} from './1764400000020-cyclium-episode-signatures.js';
import { CycliumNodeExpectations1764400000021 } from './1764400000021-cyclium-node-expectations.js';
import { CycliumWaits1764400000022 } from './1764400000022-cyclium-waits.js';
import { CycliumFlowControl1764400000023 } from './1764400000023-cyclium-flow-control.js';
import { CycliumVersions1764400000024 } from './1764400000024-cyclium-versions.js';
import { CycliumFlowRoom1764400000025 } from './1764400000025-cyclium-flow-room.js';
import { CycliumTraceContext1764400000026 } from './1764400000026-cyclium-trace-context.js';
import { CycliumActorPauses1764400000027 } from './1764400000027-cyclium-actor-pauses.js';
import { CycliumUnfinishedIndex1764400000028 } from './1764400000028-cyclium-unfinished-index.js';
import { CycliumLiveClaimsIndex1764400000029 } from './1764400000029-cyclium-live-claims-index.js';
import { CycliumLifecycleReads1764400000030 } from './1764400000030-cyclium-lifecycle-reads.js';
// prettier-ignore
import {
  CycliumEpisodeClaimColumns1764400000031,
} from './1764400000031-cyclium-episode-claim-columns.js';

export {
  CycliumSchema1764400000000,
  CycliumBusPayloads1764400000001,
  CycliumEvents1764400000002,
  CycliumEpisodeQueue1764400000003,
  CycliumTriggerOnly1764400000004,
  CycliumWorkflows1764400000005,
  CycliumNodeActors1764400000006,
  CycliumBusPositions1764400000007,
  CycliumOutputOutbox1764400000008,
  CycliumNodeBootId1764400000009,
  CycliumScopedRows1764400000010,
  CycliumRowSignatures1764400000011,
  CycliumOperatorReads1764400000012,
  CycliumRetention1764400000013,
  CycliumRetries1764400000014,
  CycliumDueRequests1764400000015,
  CycliumBusPositionTypes1764400000019,
  CycliumEpisodeSignatures1764400000020,
  CycliumNodeExpectations1764400000021,
};

export {
  CYCLIUM_TABLES,
  cycliumGrants,
  type CycliumPublisher,
  type CycliumRoles,
} from './grants.js';

/** Add these to your DataSource's `migrations`, in this order. */
export const cycliumMigrations = [
  CycliumSchema1764400000000,
  CycliumBusPayloads1764400000001,
  CycliumEvents1764400000002,
  CycliumEpisodeQueue1764400000003,
  CycliumTriggerOnly1764400000004,
  CycliumWorkflows1764400000005,
  CycliumNodeActors1764400000006,
  CycliumBusPositions1764400000007,
  CycliumOutputOutbox1764400000008,
  CycliumNodeBootId1764400000009,
  CycliumScopedRows1764400000010,
  CycliumRowSignatures1764400000011,
  CycliumOperatorReads1764400000012,
  CycliumRetention1764400000013,
  CycliumRetries1764400000014,
  CycliumDueRequests1764400000015,
  CycliumBusPositionTypes1764400000019,
  CycliumEpisodeSignatures1764400000020,
  CycliumNodeExpectations1764400000021,
  CycliumWaits1764400000022,
  CycliumFlowControl1764400000023,
  CycliumVersions1764400000024,
  CycliumFlowRoom1764400000025,
  CycliumTraceContext1764400000026,
  CycliumActorPauses1764400000027,
  CycliumUnfinishedIndex1764400000028,
  CycliumLiveClaimsIndex1764400000029,
  CycliumLifecycleReads1764400000030,
  CycliumEpisodeClaimColumns1764400000031,
];
