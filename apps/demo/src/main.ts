import 'reflect-metadata';
import { ConsoleLogger, Logger, type LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AppModule } from './app.module.js';
import { demoCycliumSettings } from './demo-settings.js';
import { DatabaseUnavailableFilter } from './http/database-unavailable.filter.js';

const LEVELS: LogLevel[] = ['fatal', 'error', 'warn', 'log', 'debug', 'verbose'];

/**
 * Nest's console logger, so every line (Cyclium's included) goes through the host's choice:
 * `LOG_LEVEL=debug` adds each episode's start and end, `LOG_FORMAT=json` writes one JSON object a line.
 */
function demoLogger(env: NodeJS.ProcessEnv): ConsoleLogger {
  const level = (env.LOG_LEVEL ?? 'log') as LogLevel;
  const upTo = LEVELS.includes(level) ? LEVELS.indexOf(level) : LEVELS.indexOf('log');
  return new ConsoleLogger({ logLevels: LEVELS.slice(0, upTo + 1), json: env.LOG_FORMAT === 'json' });
}

async function bootstrap(): Promise<void> {
  // forceCloseConnections: once the drain is done, close keep-alive connections that a client keeps
  // busy too, or the process would wait for that client to stop sending before it could exit.
  const app = await NestFactory.create<NestExpressApplication>(AppModule, { logger: demoLogger(process.env), forceCloseConnections: true });
  // Express's 100 KB default would answer 413 before the bus could say which field is too large:
  // let a body through up to the bus's payload limit (the library's 1 MiB unless set) plus room for the rest.
  const maxPayloadBytes = demoCycliumSettings(process.env).busMaxPayloadBytes ?? 1_048_576;
  app.useBodyParser('json', { limit: maxPayloadBytes + 64 * 1024 });
  app.useGlobalFilters(new DatabaseUnavailableFilter(app.get(HttpAdapterHost).httpAdapter));
  // SIGTERM runs beforeApplicationShutdown, where Cyclium drains before TypeORM closes.
  app.enableShutdownHooks();
  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port, '127.0.0.1');
  new Logger('Demo').log(`listening on http://127.0.0.1:${port}`);
}

bootstrap().catch((error: unknown) => {
  // A node that cannot boot (port in use, database away, missing schema) says why and exits non-zero.
  new Logger('Demo').error(`could not start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
