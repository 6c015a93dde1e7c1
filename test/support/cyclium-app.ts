import type {
  DynamicModule,
  INestApplicationContext,
  LoggerService,
  Provider,
  Type,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CycliumModule, type CycliumOptions } from '@cyclium/nestjs';

export interface CycliumAppOptions {
  url: string;
  cyclium?: CycliumOptions;
  /** Replaces `CycliumModule.forRoot(cyclium)` (for forRootAsync cases). */
  cycliumModule?: DynamicModule;
  dataSourceName?: string;
  /** The host's own providers (actors, output adapters). */
  providers?: Provider[];
  imports?: Array<DynamicModule | Type<unknown>>;
  /** The app's logger (Nest's Logger then writes to it); default: none. */
  logger?: LoggerService;
  /** Connections in the app's pool; default 5. */
  poolSize?: number;
}

/** One Cyclium node inside this process: its own Nest app, its own small pool. Close it in afterAll. */
export async function startCycliumApp(
  options: CycliumAppOptions,
): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.url,
        name: options.dataSourceName,
        extra: { max: options.poolSize ?? 5 },
      }),
      options.cycliumModule ?? CycliumModule.forRoot({ jitterMs: 0, ...options.cyclium }),
      ...(options.imports ?? []),
    ],
    providers: options.providers ?? [],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: options.logger ?? false });
  try {
    await app.init();
  } catch (error) {
    // A boot that fails after TypeORM connected must still release its pool.
    await app.close().catch(() => undefined);
    throw error;
  }
  return app;
}
