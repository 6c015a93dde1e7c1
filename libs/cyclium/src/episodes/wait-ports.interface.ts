import type { EntityManager } from 'typeorm';
import type { EpisodeRow } from './episode-context.interface.js';
import type { Ownership } from './episode-statements.js';
import type { WriteScope } from './owned-writes.js';
import type { ChildSpec, WaitStep, WaitStepOutcome } from './step-ports.interface.js';
import type { ChildHandle } from './wait.types.js';

/** Runs a wait of a running episode (the waits room's WaitSteps). */
export interface WaitStepRunner {
  run(scope: WriteScope, ownership: Ownership, step: WaitStep): Promise<WaitStepOutcome>;
}

export const WAIT_STEPS = Symbol('CYCLIUM_WAIT_STEPS');

/**
 * Triggers a child inside the parent's transaction step (the dispatch room's ChildEpisodes): the
 * child's row and request commit with the parent's journal of its start, or neither does.
 */
export interface ChildStarter {
  start(manager: EntityManager, parent: EpisodeRow, child: ChildSpec): Promise<ChildHandle>;
}

export const CHILD_STARTER = Symbol('CYCLIUM_CHILD_STARTER');
