import { errorMessage } from '../sql/database-errors.js';

/** The episode was canceled (`Episodes.cancel`); it stops before its next step. */
export class EpisodeCanceledError extends Error {
  override readonly name = 'EpisodeCanceledError';
  constructor(readonly episodeId: string) {
    super(`episode ${episodeId} was canceled`);
  }
}

/** A budget (`maxSteps` or `maxWallMs`) ran out; the episode stops before its next step. */
export class BudgetExceededError extends Error {
  override readonly name = 'BudgetExceededError';
}

/** On resume, the code asked for a different step than the journal recorded at that position. */
export class NondeterministicResumeError extends Error {
  override readonly name = 'NondeterministicResumeError';
}

/** The node is draining: the episode was stamped `interrupted` and will be restarted elsewhere. */
export class EpisodeInterruptedError extends Error {
  override readonly name = 'EpisodeInterruptedError';
  constructor(readonly episodeId: string) {
    super(`episode ${episodeId} was interrupted by a drain`);
  }
}

/**
 * `ep.sleep` reached a wake-up time still ahead: the run stops here and the episode waits
 * (`waiting`) until then, to be resumed by any node. Not a failure; a host's catch cannot keep it.
 */
export class EpisodeSleeping extends Error {
  override readonly name: string = 'EpisodeSleeping';
  constructor(
    readonly sleepName: string,
    readonly delayMs: number,
  ) {
    super(`sleeping "${sleepName}" for ${delayMs} ms`);
  }
}

/**
 * A wait (`ep.waitForSignal`, `ep.waitForEvent`, `ep.waitForChildren`) was not satisfied yet: its
 * transaction already left the episode `waiting`, with its wake-up, and gave the claim up; the run
 * stops here, recording nothing more. Not a failure; a host's catch cannot keep it.
 */
export class EpisodeWaiting extends Error {
  override readonly name = 'EpisodeWaiting';
  constructor(
    readonly waitName: string,
    readonly kind: 'signal' | 'event' | 'children',
    readonly deadline: string | null,
  ) {
    super(`waiting "${waitName}"${deadline ? ` until ${deadline} at the latest` : ''}`);
  }
}

/**
 * `Episodes.list` was asked for something it cannot page by: the message names the field. A
 * caller's mistake (a 400 over HTTP).
 */
export class InvalidListQueryError extends Error {
  override readonly name = 'InvalidListQueryError';
}

/**
 * A step returned a value that cannot be stored (not JSON: a cycle, a BigInt). The step's function
 * has run; the episode fails with `error_class: 'step_result'` unless the host catches this.
 */
export class StepResultError extends Error {
  override readonly name = 'StepResultError';
  readonly errorClass = 'step_result';

  constructor(
    readonly stepName: string,
    problem: string,
  ) {
    super(`step "${stepName}" returned a result that ${problem}; return plain JSON data`);
  }
}

/**
 * `Episodes.trigger` (or `create`) was given input PostgreSQL cannot store; nothing was written. A
 * caller's mistake (a 400 over HTTP): `field` names what to fix.
 */
export class InvalidTriggerError extends TypeError {
  override readonly name = 'InvalidTriggerError';

  constructor(
    readonly field: 'payload' | 'dedupeKey' | 'delayMs' | 'runAt' | 'retry' | 'priority',
    message: string,
  ) {
    super(message);
  }
}

/**
 * A write of a running episode kept meeting database faults until this node could no longer be
 * sure it owns the episode (its claim's local deadline passed, or, with claims off, the recovery's
 * staleness window). Nothing more is written by this run: the row stays `running` for recovery,
 * and the run is not recorded as the host's failure. A step that throws it must not be caught
 * and retried by the host: the episode stops there.
 */
export class EpisodeWriteUnavailableError extends Error {
  override readonly name = 'EpisodeWriteUnavailableError';

  constructor(episodeId: string, what: string, cause: unknown) {
    super(
      `episode ${episodeId}: the ${what} could not be written (${errorMessage(cause)}); left to ` +
        `recovery`,
      { cause },
    );
  }
}
