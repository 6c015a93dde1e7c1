import { type ArgumentsHost, Catch, HttpException, HttpStatus, Logger } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { isDatabaseUnavailable } from '@cyclium/nestjs';

/** While the database stays away, the 503 line is repeated at most this often, with how many requests it answered. */
const OUTAGE_LINE_EVERY_MS = 30_000;

/**
 * What the HTTP layer logs, one line per case, never a driver's stack at the default levels:
 * - a request that meets an unreachable database answers 503 (try again later), not 500, with one
 *   warning when the outage is first met and a reminder at most every 30 s while it lasts;
 * - an exception the app threw on purpose (an HttpException: 400, 404, 409, a health probe's 503)
 *   or the body parser's 4xx is the answer meant: debug only, Nest's usual reply;
 * - anything else is a bug or a fault nobody handled: one error line naming the request and the
 *   error, the stack at debug, and Nest's usual 500 reply.
 */
@Catch()
export class DatabaseUnavailableFilter extends BaseExceptionFilter {
  private readonly logger = new Logger('Http');
  private lastOutageLine: number | undefined;
  private answeredSince = 0;

  override catch(exception: unknown, host: ArgumentsHost): void {
    if (host.getType() !== 'http') {
      super.catch(exception, host);
      return;
    }
    const request = describeRequest(host);
    if (isDatabaseUnavailable(exception)) {
      this.unavailable(exception, request);
      this.reply(host, HttpStatus.SERVICE_UNAVAILABLE, {
        statusCode: HttpStatus.SERVICE_UNAVAILABLE,
        message: 'the database is unavailable; retry shortly',
      });
      return;
    }
    const meant =
      exception instanceof HttpException ? exception.getStatus() : clientErrorStatus(exception);
    if (meant !== undefined) {
      this.logger.debug(
        `${request} answered ${meant}: ${firstLine(exception instanceof Error ? exception.message : String(exception))}`,
      );
      super.catch(exception, host);
      return;
    }
    const error = exception instanceof Error ? exception : undefined;
    this.logger.error(
      `${request} answered 500: ${error ? `${error.name}: ${firstLine(error.message)}` : firstLine(String(exception))}`,
    );
    if (error?.stack) this.logger.debug(error.stack);
    this.reply(host, HttpStatus.INTERNAL_SERVER_ERROR, {
      statusCode: HttpStatus.INTERNAL_SERVER_ERROR,
      message: 'Internal server error',
    });
  }

  private unavailable(exception: unknown, request: string): void {
    const now = Date.now();
    this.answeredSince++;
    if (this.lastOutageLine !== undefined && now - this.lastOutageLine < OUTAGE_LINE_EVERY_MS)
      return;
    const since =
      this.answeredSince > 1
        ? ` (${this.answeredSince} request(s) answered 503 since the last line)`
        : '';
    const why = firstLine(exception instanceof Error ? exception.message : String(exception));
    this.logger.warn(
      `answering 503 while the database is unavailable, first to ${request}: ${why}${since}`,
    );
    this.lastOutageLine = now;
    this.answeredSince = 0;
  }

  private reply(host: ArgumentsHost, status: HttpStatus, body: object): void {
    const adapter = this.applicationRef ?? this.httpAdapterHost?.httpAdapter;
    const response: unknown = host.switchToHttp().getResponse();
    if (!adapter) return;
    if (adapter.isHeadersSent(response)) {
      adapter.end(response);
      return;
    }
    if (status === HttpStatus.SERVICE_UNAVAILABLE) adapter.setHeader(response, 'retry-after', '1');
    adapter.reply(response, body, status);
  }
}

/** The 4xx of an `http-errors` error (the body parser's malformed JSON, a body too large): the client's mistake. */
function clientErrorStatus(exception: unknown): number | undefined {
  const status = (exception as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === 'number' && status >= 400 && status < 500 ? status : undefined;
}

function describeRequest(host: ArgumentsHost): string {
  const request = host
    .switchToHttp()
    .getRequest<{ method?: string; originalUrl?: string; url?: string }>();
  return `${request.method ?? '?'} ${request.originalUrl ?? request.url ?? '?'}`;
}

/** A driver error's message can run to many lines (the query, a hint): the log keeps the first. */
function firstLine(text: string): string {
  const line = text.split('\n', 1)[0] ?? '';
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}
