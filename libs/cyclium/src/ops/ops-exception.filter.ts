import {
  Catch,
  HttpException,
  Logger,
  type ArgumentsHost,
  type ExceptionFilter,
} from '@nestjs/common';
import { InvalidListQueryError } from '../episodes/episode-errors.js';
import { errorMessage, isDatabaseUnavailable } from '../sql/database-errors.js';

interface OpsResponse {
  status?(code: number): OpsResponse;
  code?(code: number): OpsResponse;
  send?(body: unknown): unknown;
  json?(body: unknown): unknown;
}

/**
 * The API's errors as JSON, whatever filters the host has: a caller's own mistake is a 4xx, a
 * database that is away a 503 (the page keeps polling and says so), anything else a 500 with one
 * log line naming it, never a driver's stack.
 */
@Catch()
export class OpsExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('CycliumOps');

  catch(error: unknown, host: ArgumentsHost): void {
    const [status, body] = this.answer(error);
    const response = host.switchToHttp().getResponse<OpsResponse>();
    // Express has status().json(); Fastify has code().send().
    const sized = response.status ? response.status(status) : response.code!(status);
    if (sized.json) sized.json(body);
    else sized.send!(body);
  }

  private answer(error: unknown): [number, unknown] {
    if (error instanceof HttpException) return [error.getStatus(), error.getResponse()];
    if (error instanceof InvalidListQueryError)
      return [400, { statusCode: 400, message: [error.message], error: 'Bad Request' }];
    if (isDatabaseUnavailable(error)) {
      this.logger.warn(`database unavailable: ${errorMessage(error)}`);
      return [
        503,
        {
          statusCode: 503,
          message: 'the database is unavailable; try again shortly',
          error: 'Service Unavailable',
        },
      ];
    }
    this.logger.error(`operations API failed: ${errorMessage(error)}`);
    return [
      500,
      {
        statusCode: 500,
        message: 'internal error (logged on the node)',
        error: 'Internal Server Error',
      },
    ];
  }
}
