import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { EventScope } from '../bus/durable-events.interface.js';
import type { EpisodeRow } from './episode-context.interface.js';

/** Asks whichever node runs the episode to stop it before its next step. */
export const CANCEL_EVENT = 'cyclium.episode.cancel';

/** The bus events an episode publishes as its status changes. */
export type LifecycleEventType =
  | 'episode.started'
  | 'episode.completed'
  | 'episode.failed'
  | 'episode.canceled'
  | 'episode.queued'
  | 'episode.dropped';

/** The lifecycle events that end an episode: completed, failed, canceled, dropped. */
export const TERMINAL_EVENTS: readonly LifecycleEventType[] = [
  'episode.completed',
  'episode.failed',
  'episode.canceled',
  'episode.dropped',
];

/** The payload every lifecycle bus event carries. */
export interface LifecyclePayload {
  episodeId: string | null;
  actorId: string;
  expectationId: string;
  status: EpisodeStatus | 'dropped';
  dedupeKey: string | null;
  sourceStack: string | null;
  sourceEnv: string | null;
  workflowInstanceId: string | null;
  workflowStepId: string | null;
  node: string;
  errorClass?: string;
  /**
   * Re-published by `Recovery.reconcileWorkflows` for an episode that ended while no engine heard
   * it.
   */
  replayed?: boolean;
}

export function lifecycleEvent(
  type: LifecycleEventType,
  episode: Pick<
    EpisodeRow,
    | 'actorId'
    | 'expectationId'
    | 'dedupeKey'
    | 'sourceStack'
    | 'sourceEnv'
    | 'workflowInstanceId'
    | 'workflowStepId'
  > & {
    id: string | null;
  },
  status: LifecyclePayload['status'],
  node: string,
  extra: { errorClass?: string; replayed?: boolean } = {},
): { type: LifecycleEventType; payload: LifecyclePayload; scope: EventScope } {
  return {
    type,
    // The episode's own stack and env read it, whichever node ran it.
    scope: { stackSlug: episode.sourceStack, env: episode.sourceEnv },
    payload: {
      episodeId: episode.id,
      actorId: episode.actorId,
      expectationId: episode.expectationId,
      status,
      dedupeKey: episode.dedupeKey,
      sourceStack: episode.sourceStack,
      sourceEnv: episode.sourceEnv,
      workflowInstanceId: episode.workflowInstanceId ?? null,
      workflowStepId: episode.workflowStepId ?? null,
      node,
      ...extra,
    },
  };
}
