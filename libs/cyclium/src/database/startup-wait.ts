import { setTimeout as sleep } from 'node:timers/promises';
import { errorCode, errorMessage, isTransientDatabaseError } from '../sql/database-errors.js';
import { CycliumStartupError, startupProblem } from './startup-errors.js';

/** The pause after the first failed attempt; doubled after each later one, up to MAX_PAUSE_MS. */
const FIRST_PAUSE_MS = 1_000;
const MAX_PAUSE_MS = 10_000;

/** A server that accepts connections but no writes yet: a standby still being promoted. */
const READ_ONLY = '25006';

/**
 * Whether boot should wait this database error out: the server is not up yet, is starting or
 * shutting down, dropped the connection, is read-only while a failover promotes a standby, or
 * refused this one attempt for a reason of the moment. What waiting cannot fix (credentials, an
 * unknown database or host, a malformed URL) is not, nor anything that is not a database error.
 */
export function worthWaitingFor(error: unknown): boolean {
  if (startupProblem(error) !== undefined) return false;
  return isTransientDatabaseError(error) || errorCode(error) === READ_ONLY;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

/**
 * Runs the steps of a node's boot that touch the database (the first connection, the schema probe,
 * the actor definitions, the bus's LISTEN, the node's registration, the queued backlog) through a
 * failover: a step that meets a database worth waiting for is tried again, 1 s doubling to 10 s
 * apart, one warning per attempt saying how long it has waited and until when it keeps trying, for
 * up to `startupWaitMs` from the start of its first failed attempt; then boot fails with a
 * CycliumStartupError. A managed failover takes 10–120 s: a node that exited meanwhile would leave
 * its return to a supervisor's backoff.
 */
export class StartupWait {
  constructor(
    private readonly waitMs: number,
    private readonly warn: (line: string) => void,
    private readonly pause: (ms: number) => Promise<unknown> = sleep,
  ) {}

  /**
   * `work`, until it succeeds or fails for a reason waiting cannot fix; `what` names the step in
   * lines.
   */
  async run<T>(what: string, work: () => Promise<T>): Promise<T> {
    let since: number | undefined;
    let pauseMs = FIRST_PAUSE_MS;
    for (;;) {
      const attemptAt = performance.now();
      try {
        return await work();
      } catch (error) {
        if (!worthWaitingFor(error)) throw error;
        since ??= attemptAt;
        const waited = performance.now() - since;
        const left = this.waitMs - waited;
        const cause = errorMessage(error);
        if (left <= 0) {
          const gaveUp = `gave up after waiting ${seconds(waited)} (startupWaitMs ${this.waitMs})`;
          throw new CycliumStartupError(
            `${what}: the database is not available (${cause}); ${gaveUp}`,
            error,
          );
        }
        const next = Math.min(pauseMs, left);
        const until = new Date(Date.now() + left).toISOString();
        this.warn(
          `${what}: the database is not available yet (${cause}); waited ${seconds(waited)}, ` +
            `trying again in ${seconds(next)}, until ${until} (startupWaitMs ${this.waitMs})`,
        );
        await this.pause(next);
        pauseMs = Math.min(pauseMs * 2, MAX_PAUSE_MS);
      }
    }
  }
}
