import type { DynamicModule, INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CycliumModule, type CycliumOptions } from '@cyclium/nestjs';

export interface CycliumAppOptions {
  url: string;
  cyclium?: CycliumOptions;
  /** Replaces `CycliumModule.forRoot(cyclium)` (for forRootAsync cases). */
  cycliumModule?: DynamicModule;
  dataSourceName?: string;
}

/** One Cyclium node inside this process: its own Nest app, its own small pool. Close it in afterAll. */
export async function startCycliumApp(options: CycliumAppOptions): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: options.url, name: options.dataSourceName, extra: { max: 3 } }),
      options.cycliumModule ?? CycliumModule.forRoot({ jitterMs: 0, ...options.cyclium }),
    ],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  try {
    await app.init();
  } catch (error) {
    // A boot that fails after TypeORM connected must still release its pool.
    await app.close().catch(() => undefined);
    throw error;
  }
  return app;
}
