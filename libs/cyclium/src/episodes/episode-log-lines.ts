import type { Logger } from '@nestjs/common';
import { errorMessage, isDatabaseUnavailable } from '../sql/database-errors.js';
import type { EpisodeRow } from './episode-context.interface.js';

/**
 * Every log line names an episode the same way, so an operator can grep one id or one actor across
 * nodes.
 */
export function episodeLabel(
  episode: Pick<EpisodeRow, 'id' | 'actorId' | 'expectationId'>,
): string {
  return `episode ${episode.id} (${episode.actorId}.${episode.expectationId})`;
}

/**
 * How a log line of an operator's action ends: `by an operator`, and the reason they gave. Quoted
 * as JSON, so a reason's line breaks cannot forge the lines that follow; cut at 500 characters.
 */
export function byAnOperator(reason?: string): string {
  return reason === undefined
    ? 'by an operator'
    : `by an operator, reason ${JSON.stringify(reason.slice(0, 500))}`;
}

/**
 * A log line carries one line of a message: a driver's multi-line text or a stack would drown the
 * rest.
 */
export function firstLine(text: string, max = 300): string {
  const line = text.split('\n', 1)[0] ?? '';
  return line.length > max ? `${line.slice(0, max)}…` : line;
}

/**
 * The one warning a failed run gets: its class and the thrown error's name and first line. The
 * stack is for the host's own bugs only (class `crash`, or a class the host set), and then at
 * debug: the library's own classes and an unreachable database are expected and say all there is.
 */
export function failureLines(
  episode: EpisodeRow,
  errorClass: string,
  cause: unknown,
  decided: boolean,
): { warn: string; debug?: string } {
  const error = cause instanceof Error ? cause : undefined;
  const what = error
    ? `${error.name === 'Error' ? '' : `${error.name}: `}${firstLine(error.message)}`
    : firstLine(String(cause));
  const warn = `${episodeLabel(episode)} failed as ${errorClass}: ${what}`;
  if (decided || !error?.stack || isDatabaseUnavailable(error)) return { warn };
  return { warn, debug: `${episodeLabel(episode)} failed at:\n${error.stack}` };
}

/**
 * A start that failed: a warning while the database is away (expected; recovery retries), an error
 * otherwise.
 */
export function logStartFailure(
  logger: Pick<Logger, 'warn' | 'error'>,
  what: string,
  error: unknown,
): void {
  const line = `could not start ${what}: ${firstLine(errorMessage(error))}`;
  if (isDatabaseUnavailable(error)) logger.warn(line);
  else logger.error(line);
}
