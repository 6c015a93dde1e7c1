import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

async function bootstrap(): Promise<void> {
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn', 'log'] });
  // SIGTERM runs beforeApplicationShutdown, where Cyclium drains before TypeORM closes.
  app.enableShutdownHooks();
  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port, '127.0.0.1');
  new Logger('Demo').log(`listening on http://127.0.0.1:${port}`);
}

void bootstrap();
