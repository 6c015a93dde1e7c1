import 'reflect-metadata';
import { ConsoleLogger, Logger, type LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Server } from 'node:http';
import { AppModule } from './app.module.js';
import { demoCycliumSettings } from './demo-settings.js';
import { DatabaseUnavailableFilter } from './http/database-unavailable.filter.js';
import { registerDemoMetrics } from './metrics/metrics-sdk.js';

/** Errors whose message is the whole story: their stack would show our internals, not the cause. */
const SELF_EXPLAINING = new Set([
  'CycliumStartupError',
  'CycliumConfigError',
  'MissingSchemaError',
  'DuplicateNodeIdentityError',
  'DemoStartupError',
]);

class DemoStartupError extends Error {
  override readonly name = 'DemoStartupError';
}

/** Checked before Nest starts: pg would read "not a url" as a host named "base" and retry its lookup. */
function checkDatabaseUrl(url: string | undefined): void {
  if (!url)
    throw new DemoStartupError(
      'DATABASE_URL is not set (npm start sets it; to run a node alone, point it at a migrated database)',
    );
  if (!URL.canParse(url) || !['postgres:', 'postgresql:'].includes(new URL(url).protocol)) {
    throw new DemoStartupError('DATABASE_URL is not a postgres:// or postgresql:// connection URL');
  }
}

/**
 * Listens without Nest's `listen`, which logs a failure as an error of its own before rethrowing:
 * a port in use is said once, by the caller.
 */
function listenOn(server: Server, port: number): Promise<void> {
  return new Promise((listening, failed) => {
    const refused = (error: NodeJS.ErrnoException) =>
      failed(
        error.code === 'EADDRINUSE'
          ? new DemoStartupError(`port ${port} is in use (set PORT, or stop what holds it)`)
          : error,
      );
    server.once('error', refused);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', refused);
      listening();
    });
  });
}

const LEVELS: LogLevel[] = ['fatal', 'error', 'warn', 'log', 'debug', 'verbose'];

/**
 * Nest's console logger, so every line (Cyclium's included) goes through the host's choice:
 * `LOG_LEVEL=debug` adds each episode's start and end, `LOG_FORMAT=json` writes one JSON object a line.
 */
function demoLogger(env: NodeJS.ProcessEnv): ConsoleLogger {
  const level = (env.LOG_LEVEL ?? 'log') as LogLevel;
  const upTo = LEVELS.includes(level) ? LEVELS.indexOf(level) : LEVELS.indexOf('log');
  return new ConsoleLogger({
    logLevels: LEVELS.slice(0, upTo + 1),
    json: env.LOG_FORMAT === 'json',
  });
}

async function bootstrap(): Promise<void> {
  checkDatabaseUrl(process.env.DATABASE_URL);
  // Before the app exists: Cyclium's module looks for a MeterProvider once, as it starts.
  registerDemoMetrics();
  // forceCloseConnections: once the drain is done, close keep-alive connections that a client keeps
  // busy too, or the process would wait for that client to stop sending before it could exit.
  const app = await NestFactory.create<NestExpressApplication>(AppModule, {
    logger: demoLogger(process.env),
    forceCloseConnections: true,
  });
  // Express's 100 KB default would answer 413 before the bus could say which field is too large:
  // let a body through up to the bus's payload limit (the library's 1 MiB unless set) plus room for the rest.
  const maxPayloadBytes = demoCycliumSettings(process.env).busMaxPayloadBytes ?? 1_048_576;
  app.useBodyParser('json', { limit: maxPayloadBytes + 64 * 1024 });
  app.useGlobalFilters(new DatabaseUnavailableFilter(app.get(HttpAdapterHost).httpAdapter));
  // SIGTERM runs beforeApplicationShutdown, where Cyclium drains before TypeORM closes.
  app.enableShutdownHooks();
  const port = Number(process.env.PORT ?? 3000);
  // Boot first (the node registers itself), then the port: a node that cannot listen closes the
  // app, which runs Cyclium's shutdown and so removes the cyclium_nodes row it had just written.
  await app.init();
  try {
    await listenOn(app.getHttpServer() as Server, port);
  } catch (error) {
    await app.close().catch(() => undefined);
    throw error;
  }
  new Logger('Demo').log(`listening on http://127.0.0.1:${port}`);
}

bootstrap().catch((error: unknown) => {
  // A node that cannot boot (port in use, database away, missing schema) says why and exits non-zero.
  const explained = error instanceof Error && SELF_EXPLAINING.has(error.name);
  new Logger('Demo').error(
    `could not start: ${error instanceof Error ? (explained ? error.message : (error.stack ?? error.message)) : String(error)}`,
  );
  process.exit(1);
});
