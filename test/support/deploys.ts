import { afterAll, afterEach, beforeAll } from '@jest/globals';
import type { INestApplication, Type } from '@nestjs/common';
import { CycliumOpsModule } from '@cyclium/nestjs/ops';
import type pg from 'pg';
import { startCycliumApp } from './cyclium-app.js';
import { freshDatabase, pool } from './database.js';

/** The node a describe block "deploys" again and again, and its database. */
export interface Deploys {
  readonly url: string;
  readonly db: pg.Pool;
  /** The app of the last deploy (throws before the first). */
  readonly app: INestApplication;
  /** Its HTTP base URL, with `ops` (empty without). */
  readonly base: string;
  /** Stops the last app (its episodes asleep or waiting) and starts one hosting `actor`. */
  deploy(actor: Type<unknown>): Promise<INestApplication>;
}

/**
 * One node of `identity` on a fresh database, deployed with other code as each test says (claims
 * `postgres`, trigger poll 200 ms; with `ops`, the operations module at `/ops` over HTTP); called
 * inside a describe block, whose hooks it registers: each test ends with its app closed.
 */
export function inProcessDeploys(identity: string, options: { ops?: boolean } = {}): Deploys {
  let url = '';
  let db: pg.Pool | undefined;
  let app: INestApplication | undefined;
  let base = '';
  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 3);
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    await db?.end();
  });
  return {
    get url() {
      return url;
    },
    get db() {
      if (!db) throw new Error('no database before beforeAll');
      return db;
    },
    get app() {
      if (!app) throw new Error('nothing deployed yet');
      return app;
    },
    get base() {
      return base;
    },
    async deploy(actor) {
      await app?.close();
      app = (await startCycliumApp({
        url,
        cyclium: { nodeIdentity: identity, workClaims: 'postgres', triggerPollIntervalMs: 200 },
        providers: [actor],
        imports: options.ops ? [CycliumOpsModule.forRoot({ path: 'ops', guard: false })] : [],
      })) as INestApplication;
      if (options.ops) {
        await app.listen(0, '127.0.0.1');
        base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
      }
      return app;
    },
  };
}
