import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Get, NotFoundException, Post, type INestApplication } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { HealthIndicatorService, TerminusModule } from '@nestjs/terminus';
import { DatabaseUnavailableError } from '@cyclium/nestjs';
import { CycliumHealthIndicator } from '@cyclium/nestjs/health';
import { HealthController } from '../apps/demo/src/health/health.controller.js';
import { DatabaseUnavailableFilter } from '../apps/demo/src/http/database-unavailable.filter.js';
import { CapturingLogger, STACK_LINE, aboveDebug } from './support/capturing-logger.js';

/** A driver's error as TypeORM surfaces it: a name, a code, and a message that runs to several lines. */
function driverError(): Error {
  return Object.assign(
    new Error(
      'syntax error at or near "SELEC"\nLINE 1: SELEC * FROM cyclium_episodes\n        ^\nHINT: check the query',
    ),
    {
      name: 'QueryFailedError',
      code: '42601',
    },
  );
}

@Controller('probe')
class ProbeController {
  @Get('bug')
  bug(): never {
    throw driverError();
  }

  @Get('missing')
  missing(): never {
    throw new NotFoundException('no episode 42');
  }

  @Post('body')
  body(): string {
    return 'ok';
  }

  @Get('database')
  database(): never {
    throw new DatabaseUnavailableError(
      'list episodes',
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    );
  }
}

describe("the demo's HTTP layer logs one line per failure, and nothing above debug for a 4xx", () => {
  const logger = new CapturingLogger();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [TerminusModule.forRoot({ logger: false })],
      controllers: [HealthController, ProbeController],
      providers: [
        {
          // The node's readiness as it reads while the database does not answer.
          provide: CycliumHealthIndicator,
          inject: [HealthIndicatorService],
          useFactory: (indicators: HealthIndicatorService) => ({
            isLive: (key: string) => indicators.check(key).up(),
            isReady: (key: string) =>
              Promise.resolve(
                indicators.check(key).down({
                  reason: 'database: no answer within 1500 ms',
                  failing: ['database'],
                  node: 'node-1',
                  mode: 'full',
                }),
              ),
          }),
        },
      ],
    }).compile();
    app = moduleRef.createNestApplication({ logger });
    app.useGlobalFilters(new DatabaseUnavailableFilter(app.get(HttpAdapterHost).httpAdapter));
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });

  afterAll(async () => {
    await app?.close();
  });

  /** The lines one request logged, by status. */
  const request = async (path: string, init?: RequestInit) => {
    const before = logger.lines.length;
    const response = await fetch(`${url}${path}`, init);
    await response.arrayBuffer();
    return { status: response.status, lines: logger.lines.slice(before) };
  };

  it('logs a 500 as one error line naming the request and the error, the driver text cut to its first line', async () => {
    const { status, lines } = await request('/probe/bug');
    expect(status).toBe(500);
    expect(lines.filter(aboveDebug)).toEqual([
      {
        level: 'error',
        context: 'Http',
        text: 'GET /probe/bug answered 500: QueryFailedError: syntax error at or near "SELEC"',
      },
    ]);
    // The stack is there for whoever turns debug on.
    expect(
      lines.filter((line) => line.level === 'debug' && STACK_LINE.test(line.text)),
    ).toHaveLength(1);
  });

  it('logs a 4xx (thrown, or malformed JSON) at debug only', async () => {
    const missing = await request('/probe/missing');
    expect(missing.status).toBe(404);
    expect(missing.lines.filter(aboveDebug)).toEqual([]);
    expect(missing.lines).toEqual([
      expect.objectContaining({
        level: 'debug',
        text: 'GET /probe/missing answered 404: no episode 42',
      }),
    ]);

    const malformed = await request('/probe/body', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"nope',
    });
    expect(malformed.status).toBe(400);
    expect(malformed.lines.filter(aboveDebug)).toEqual([]);
  });

  it('logs a 503 for an unreachable database once, not once per request', async () => {
    const first = await request('/probe/database');
    const second = await request('/probe/database');
    expect([first.status, second.status]).toEqual([503, 503]);
    expect(first.lines.filter(aboveDebug)).toEqual([
      expect.objectContaining({
        level: 'warn',
        text: expect.stringContaining(
          'answering 503 while the database is unavailable, first to GET /probe/database',
        ),
      }),
    ]);
    expect(first.lines[0]?.text).not.toMatch(STACK_LINE);
    expect(second.lines).toEqual([]);
  });

  it('logs a failed health probe as one short line, not the report', async () => {
    const { status, lines } = await request('/health/ready');
    expect(status).toBe(503);
    expect(lines.filter(aboveDebug)).toEqual([
      {
        level: 'warn',
        context: 'Health',
        text: 'readiness failed: database: no answer within 1500 ms',
      },
    ]);
  });
});
