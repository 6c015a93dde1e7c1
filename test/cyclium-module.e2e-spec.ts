import { afterEach, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  Actor,
  CycliumModule,
  Env,
  Episodes,
  Expectation,
  MissingSchemaError,
  NodeIdentity,
  StackSlug,
  onCyclium,
  type CycliumOptions,
} from '@cyclium/nestjs';
import { cycliumMigrations } from '@cyclium/nestjs/migrations';
import { DataSource } from 'typeorm';
import { startCycliumApp } from './support/cyclium-app.js';
import { emptyDatabase, useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

@Injectable()
@Actor({ id: 'greeter' })
class Greeter {
  @Expectation({ trigger: 'manual' })
  async greet(): Promise<void> {}
}

/** Applies the first `count` Cyclium migrations (those not yet applied). */
async function migrate(url: string, count: number): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: cycliumMigrations.slice(0, count),
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await dataSource.destroy();
  }
}

describe('CycliumModule', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  const nodeRow = async (identity: string) =>
    (await database.db.query(`SELECT * FROM cyclium_nodes WHERE node_identity = $1`, [identity]))
      .rows[0];

  it('registers the node with its identity, stack, env and mode, and keeps last_seen_at fresh', async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'node-a',
        stackSlug: 'stack_a',
        env: 'rc',
        mode: 'trigger_only',
        nodeBeatIntervalMs: 50,
      },
    });
    apps.push(app);

    expect(app.get(NodeIdentity).name()).toBe('node-a');
    expect(app.get(StackSlug).current()).toBe('stack_a');
    expect(app.get(Env).current()).toBe('rc');
    expect(app.get(Env).scopeKey('schedule:a:b:2026-01-01T00:00')).toBe(
      'schedule:a:b:2026-01-01T00:00:rc',
    );

    const row = await nodeRow('node-a');
    expect(row).toMatchObject({
      stack: 'stack_a',
      env: 'rc',
      mode: 'trigger_only',
      pid: process.pid,
      version: '0.1.0',
    });
    const firstSeen = row.last_seen_at as Date;
    await waitFor(
      'a node beat',
      async () => ((await nodeRow('node-a')).last_seen_at as Date) > firstSeen,
    );
  });

  it('treats an empty stack slug and env as unset', async () => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: 'node-blank', stackSlug: '', env: '' },
    });
    apps.push(app);
    expect(app.get(StackSlug).current()).toBeNull();
    expect(app.get(Env).current()).toBeNull();
    expect(app.get(Env).scopeKey('k')).toBe('k');
    expect(await nodeRow('node-blank')).toMatchObject({ stack: null, env: null, mode: 'full' });
  });

  it('forRootAsync: uses a named DataSource and calls an identity function on demand', async () => {
    let calls = 0;
    const app = await startCycliumApp({
      url: database.url,
      dataSourceName: 'jobs',
      cycliumModule: CycliumModule.forRootAsync({
        useFactory: () => ({ dataSource: 'jobs', nodeIdentity: () => `fn-node-${++calls}` }),
      }),
    });
    apps.push(app);
    // Registered under one of the function's answers, and asked again on every use.
    const { rows } = await database.db.query(
      `SELECT node_identity FROM cyclium_nodes WHERE node_identity LIKE 'fn-node-%'`,
    );
    expect(rows).toHaveLength(1);
    expect(Number(rows[0].node_identity.slice('fn-node-'.length))).toBeLessThanOrEqual(calls);
    const before = calls;
    expect(app.get(NodeIdentity).name()).toBe(`fn-node-${before + 1}`);
  });

  it('publishes node.registered on diagnostics_channel with the owner node', async () => {
    const seen: unknown[] = [];
    const unsubscribe = onCyclium('node.registered', (event) => seen.push(event));
    try {
      apps.push(
        await startCycliumApp({
          url: database.url,
          cyclium: { nodeIdentity: 'node-telemetry', env: 'qa' },
        }),
      );
    } finally {
      unsubscribe();
    }
    expect(seen).toContainEqual({
      ownerNode: 'node-telemetry',
      stack: null,
      env: 'qa',
      mode: 'full',
    });
  });

  describe('invalid options fail module compile, naming the field', () => {
    const compile = (options: unknown) =>
      Test.createTestingModule({
        imports: [
          TypeOrmModule.forRoot({ type: 'postgres', url: database.url, extra: { max: 1 } }),
          CycliumModule.forRoot(options as CycliumOptions),
        ],
      }).compile();

    it.each([
      [
        { workClaimsLeaseSeconds: -5 },
        'workClaimsLeaseSeconds must be a number of seconds > 0 (got -5)',
      ],
      [{ mode: 'fast' }, 'mode must be one of: full, trigger_only, disabled (got "fast")'],
      [
        { workClaims: 'redis' },
        `workClaims must be one of: false, 'postgres', or an object implementing WorkClaimsAdapter`,
      ],
      [
        { recovery: { staleAfterMs: 0 } },
        'recovery.staleAfterMs must be a whole number of milliseconds >= 1 (got 0)',
      ],
      [{ workClaimLeaseSeconds: 30 }, 'workClaimLeaseSeconds is not a CycliumModule option'],
    ])('%j', async (options, message) => {
      const failure = compile(options);
      await expect(failure).rejects.toThrow(message);
      await expect(failure).rejects.toMatchObject({ name: 'CycliumConfigError' });
    });

    it('reports every bad field at once, through forRootAsync too', async () => {
      const failure = Test.createTestingModule({
        imports: [
          TypeOrmModule.forRoot({ type: 'postgres', url: database.url, extra: { max: 1 } }),
          CycliumModule.forRootAsync({
            useFactory: () => ({ mode: 'fast', jitterMs: 1.5 }) as unknown as CycliumOptions,
          }),
        ],
      }).compile();
      await expect(failure).rejects.toThrow(
        /mode must be one of[\s\S]*jitterMs must be a whole number/,
      );
    });
  });

  it('fails boot with a clear error when the named DataSource does not exist', async () => {
    await expect(
      startCycliumApp({ url: database.url, cyclium: { dataSource: 'nope' } }).then((app) =>
        apps.push(app),
      ),
    ).rejects.toThrow('could not find the TypeORM DataSource named "nope"');
  });

  it('names the first migration a partly migrated database lacks, before anything queries it, then boots once all have run', async () => {
    const url = await emptyDatabase('unmigrated');
    // An actor makes the registry write its definitions during init: the check must come first.
    const boot = () =>
      startCycliumApp({ url, cyclium: {}, providers: [Greeter] }).then((app) => apps.push(app));
    for (let applied = 0; applied < cycliumMigrations.length; applied++) {
      const failure = await boot().then(
        () => undefined,
        (error: unknown) => error,
      );
      const next = new cycliumMigrations[applied]().name;
      expect(failure).toBeInstanceOf(MissingSchemaError);
      expect((failure as MissingSchemaError).migration).toBe(next);
      expect((failure as Error).message).toContain(
        `Cyclium migration ${next} has not run on this database`,
      );
      expect((failure as Error).message).toContain('migrationsRun: true');
      expect((failure as Error).message).toContain('npx typeorm migration:run -d');
      await migrate(url, applied + 1);
    }
    await boot();
    expect(apps).toHaveLength(1);
    await expect(apps[0].get(Episodes).trigger('greeter', 'greet', {})).resolves.toMatchObject({
      status: 'started',
    });
  });
});
