/**
 * What the runner saw while it ran a schedule: each work operation and its answer, each fault, each
 * node's boots and exits, and which nodes were up in which mode at every change. The checker
 * judges the database's history against it. Times are epoch milliseconds on this machine, which
 * is also the database's clock (the soak's server is local).
 */
import type { CycliumMode } from '@cyclium/nestjs';
import type { ActorId, NodeAnswer } from '../node/node-protocol.js';
import type { SeedSetup, WorkOp } from '../schedule/schedule.js';
import type { NodeExit } from './node-handle.js';

export interface WorkRecord {
  n: number;
  op: WorkOp;
  /** The node it went to (its slot's node, or another up one when that was down); null: none was up. */
  slot: number | null;
  nodeId: string | null;
  sentAt: number;
  answeredAt: number;
  answer: NodeAnswer;
}

export interface FaultRecord {
  kind: string;
  at: number;
  endAt: number;
  /** The node identities it ended (kill, term, cluster stop). */
  nodeIds: string[];
  detail: string;
}

export interface NodeRecord {
  at: number;
  slot: number;
  nodeId: string;
  appName: string;
  event: 'boot' | 'ready' | 'exit';
  exit?: NodeExit;
  tail?: string[];
}

export interface NodeState {
  slot: number;
  nodeId: string;
  env: string;
  stack: string;
  actors: ActorId[];
  /** Runs the previous deploy's fs_alpha, without its event expectations. */
  legacyAlpha: boolean;
  mode: CycliumMode;
  overrides: Partial<Record<ActorId, CycliumMode>>;
}

/** The nodes up (ready, not exited) from `at` until the next entry. */
export interface Availability {
  at: number;
  nodes: NodeState[];
}

export interface RunLog {
  setup: SeedSetup;
  startedAt: number;
  /** When the schedule's last operation was done and the cluster was brought back whole. */
  scheduleEndedAt: number;
  quiesced: boolean;
  quiescedAt: number;
  work: WorkRecord[];
  faults: FaultRecord[];
  nodes: NodeRecord[];
  availability: Availability[];
  /** Something the runner itself could not do (not a verdict on the library). */
  harnessErrors: string[];
}
