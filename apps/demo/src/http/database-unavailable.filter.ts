import { type ArgumentsHost, Catch, HttpStatus, Logger } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { isDatabaseUnavailable } from '@cyclium/nestjs';

/**
 * A request that meets an unreachable database answers 503 (try again later), not 500, and logs
 * one line per outage rather than a stack trace per request. Everything else is Nest's usual handling.
 */
@Catch()
export class DatabaseUnavailableFilter extends BaseExceptionFilter {
  private readonly logger = new Logger('Http');
  private outageSince: number | undefined;

  override catch(exception: unknown, host: ArgumentsHost): void {
    if (!isDatabaseUnavailable(exception)) {
      this.outageSince = undefined;
      super.catch(exception, host);
      return;
    }
    if (this.outageSince === undefined) {
      this.outageSince = Date.now();
      this.logger.warn(`answering 503 while the database is unavailable: ${exception instanceof Error ? exception.message : String(exception)}`);
    }
    const adapter = this.applicationRef ?? this.httpAdapterHost?.httpAdapter;
    const response: unknown = host.switchToHttp().getResponse();
    adapter?.setHeader(response, 'retry-after', '1');
    adapter?.reply(
      response,
      { statusCode: HttpStatus.SERVICE_UNAVAILABLE, message: 'the database is unavailable; retry shortly' },
      HttpStatus.SERVICE_UNAVAILABLE,
    );
  }
}
