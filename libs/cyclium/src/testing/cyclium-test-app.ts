import {
  Module,
  type Abstract,
  type DynamicModule,
  type INestApplicationContext,
  type Provider,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CYCLIUM_CLOCK } from '../cyclium.constants.js';
import { CycliumModule } from '../cyclium.module.js';
import type { CycliumOptions } from '../options/cyclium-options.interface.js';
import { startPostgres, type RunningPostgres } from './embedded-postgres.js';
import { migrateDatabase } from './migrate-database.js';
import { TestClock } from './test-clock.js';
import { TestDriver, type JournalEntry, type WaitForOptions } from './test-driver.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { CycliumOutput } from '../entities/output.entity.js';

/** Options of `createCycliumTestApp`. */
export interface CycliumTestAppOptions {
  /** The modules that hold your actors and what they inject. */
  imports?: Array<Type<unknown> | DynamicModule>;
  /** Providers of the test app itself (your actors, when they are not in a module). */
  providers?: Provider[];
  /**
   * `CycliumModule` options over the kit's (`nodeIdentity: 'test-node'`, `bus: 'postgres'`,
   * `workClaims: 'postgres'`, `jitterMs: 0`, `triggerPollIntervalMs: 100`, no recovery at boot).
   */
  cyclium?: CycliumOptions;
  /**
   * The PostgreSQL to use (a database URL, migrated here). Default: an embedded server started for
   * this app (the optional peer dependency `embedded-postgres`), stopped by `close()`.
   */
  databaseUrl?: string;
}

/** A Nest app of your actors on a real PostgreSQL, with a clock the test moves. */
export interface CycliumTestApp {
  readonly app: INestApplicationContext;
  readonly clock: TestClock;
  /** The database the app uses. */
  readonly databaseUrl: string;
  /** The app's providers, as `app.get`: `Episodes`, `Bus`, your services. */
  get<T>(token: Type<T> | Abstract<T> | string | symbol): T;
  /**
   * Runs everything due (trigger requests, wake-ups, queued episodes) until nothing is running
   * and nothing is due; rejects after `timeoutMs` (default 10 000) naming what was still busy.
   */
  runUntilIdle(options?: { timeoutMs?: number }): Promise<void>;
  /** The same as `runUntilIdle`. */
  drain(options?: { timeoutMs?: number }): Promise<void>;
  readonly episodes: {
    /**
     * Waits until the episode ends (`done`, `partially_failed`, `failed` or `canceled`, or the
     * `status` asked for), running what falls due meanwhile; its row. Rejects after `timeoutMs`
     * (default 10 000) with its status then.
     */
    waitFor(id: string, options?: WaitForOptions): Promise<EpisodeRow>;
    /** The episode's journal: each step's name, kind and recorded result, in order. */
    journal(id: string): Promise<JournalEntry[]>;
    /** The outputs the episode proposed, with their delivery state. */
    outputs(id: string): Promise<CycliumOutput[]>;
  };
  /** Closes the app, then stops the embedded PostgreSQL if the kit started one. */
  close(): Promise<void>;
}

@Module({})
class CycliumTestRoot {}

/**
 * Starts your actors' modules in a Nest application context against a migrated PostgreSQL (an
 * embedded one by default) in one call, with a test clock (`clock.advance(ms)`) in place of the
 * system's. The clock can be set only here: no option of `CycliumModule` reaches it.
 */
export async function createCycliumTestApp(
  options: CycliumTestAppOptions = {},
): Promise<CycliumTestApp> {
  let postgres: RunningPostgres | undefined;
  let url = options.databaseUrl;
  if (url === undefined) {
    postgres = await startPostgres();
    url = postgres.url;
  }
  const clock = new TestClock();
  let app: INestApplicationContext | undefined;
  try {
    await migrateDatabase(url);
    const cyclium = CycliumModule.forRoot({
      nodeIdentity: 'test-node',
      bus: 'postgres',
      workClaims: 'postgres',
      jitterMs: 0,
      triggerPollIntervalMs: 100,
      recovery: { onBoot: false },
      ...options.cyclium,
    });
    // Last among the module's providers, so it replaces the system clock.
    cyclium.providers = [...(cyclium.providers ?? []), { provide: CYCLIUM_CLOCK, useValue: clock }];
    const root: DynamicModule = {
      module: CycliumTestRoot,
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 8 } }),
        ScheduleModule.forRoot(),
        cyclium,
        ...(options.imports ?? []),
      ],
      providers: options.providers ?? [],
    };
    app = await NestFactory.createApplicationContext(root, { logger: ['error', 'warn'] });
    await app.init();
  } catch (error) {
    await app?.close().catch(() => undefined);
    await postgres?.stop();
    throw error;
  }
  const started = app;
  const driver = new TestDriver(started);
  clock.drive(driver);
  return {
    app: started,
    clock,
    databaseUrl: url,
    get: <T>(token: Type<T> | Abstract<T> | string | symbol) =>
      started.get<T>(token, { strict: false }),
    runUntilIdle: (o) => driver.runUntilIdle(o?.timeoutMs),
    drain: (o) => driver.runUntilIdle(o?.timeoutMs),
    episodes: {
      waitFor: (id, o) => driver.waitFor(id, o),
      journal: (id) => driver.journal(id),
      outputs: (id) => driver.outputs(id),
    },
    close: async () => {
      try {
        await started.close();
      } finally {
        await postgres?.stop();
      }
    },
  };
}
