/**
 * An adopter's first hour, as a test: pack the library, install the tarball into two new apps
 * outside this tree (an ES module app and a CommonJS one, both `strict`, neither with
 * `skipLibCheck`) made of exactly the example files of `docs/getting-started.md`, type-check
 * them, boot each against an empty database, run the page's two episodes to `done`, SIGTERM, and
 * check the drain.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import {
  GETTING_STARTED,
  compileApp,
  installDependencies,
  packLibrary,
  gettingStartedExample,
  runMigrationsCli,
  writeApp,
  type ModuleKind,
  type PackedLibrary,
  type GettingStartedExample,
} from './support/adopter-app.js';
import { emptyDatabase, pool } from './support/database.js';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

interface EpisodeJson {
  id: string;
  status: string;
  summary: string | null;
}

describe('the packed library in a new Nest app, as docs/getting-started.md says', () => {
  let root: string;
  let example: GettingStartedExample;
  let packed: PackedLibrary;
  const nodes: DemoNode[] = [];
  const pools: pg.Pool[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'cyclium-adopter-'));
    example = gettingStartedExample(await readFile(GETTING_STARTED, 'utf8'));
    packed = await packLibrary(root);
    await installDependencies(root, packed.tarball, example);
  }, 150_000);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    await Promise.all(pools.map((p) => p.end()));
    if (root) await rm(root, { recursive: true, force: true });
  });

  it('packs README, LICENSE, the compiled JS with its .d.ts, the migrations and the operations page, and nothing from tests or maps', () => {
    const files = packed.files;
    expect(files).toEqual(
      expect.arrayContaining([
        'README.md',
        'LICENSE',
        'package.json',
        'dist/index.js',
        'dist/index.d.ts',
      ]),
    );
    expect(files).toEqual(
      expect.arrayContaining([
        'dist/migrations/index.js',
        'dist/migrations/1764400000000-cyclium-schema.js',
      ]),
    );
    expect(files).toEqual(
      expect.arrayContaining(['dist/testing/index.d.ts', 'dist/health/index.d.ts']),
    );
    expect(files.filter((f) => /\.map$|\.spec\.|tsbuildinfo|^src\/|^test\//.test(f))).toEqual([]);
    expect(files).toEqual(
      expect.arrayContaining([
        'dist/ops/index.js',
        'assets/ops/index.html',
        'assets/ops/app.js',
        'assets/ops/app.css',
      ]),
    );
    expect(
      files.filter(
        (f) =>
          !['README.md', 'LICENSE', 'package.json'].includes(f) &&
          !f.startsWith('dist/') &&
          !f.startsWith('assets/ops/'),
      ),
    ).toEqual([]);
  });

  async function adopt(kind: ModuleKind): Promise<{ node: DemoNode; db: pg.Pool }> {
    const dir = join(root, kind);
    await writeApp(dir, kind, example);
    await compileApp(root, dir);
    const url = await emptyDatabase(`adopter_${kind}`);
    const db = pool(url, 2);
    pools.push(db);
    // The ES module app migrates at boot (migrationsRun); the CommonJS one runs the TypeORM CLI first.
    if (kind === 'cjs')
      expect(await runMigrationsCli(root, dir, url)).toMatch(
        /CycliumWorkflows1764400000005 has been executed successfully/,
      );
    const node = await startNodeProcess(join(dir, 'dist/main.js'), url, {
      cwd: dir,
      env: { CYCLIUM_NODE_ID: `adopter-${kind}` },
      ready: async (candidate) =>
        (await fetch(`http://127.0.0.1:${candidate.port}/episodes/none`)).status === 404,
    });
    nodes.push(node);
    return { node, db };
  }

  const post = async (node: DemoNode, path: string, body: unknown) => {
    const response = await fetch(`http://127.0.0.1:${node.port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(response.status).toBe(202);
    return response.json() as Promise<Record<string, unknown>>;
  };

  it.each<ModuleKind>(['esm', 'cjs'])(
    '%s: type-checks, boots, runs a manual and an event episode to done, and drains on SIGTERM',
    async (kind) => {
      const { node, db } = await adopt(kind);

      const greeted = (await post(node, '/greet', { name: 'Ada' })) as {
        status: string;
        episode: EpisodeJson;
      };
      expect(greeted.status).toBe('started');
      const done = await waitFor('the greet episode to finish', async () => {
        const episode = await node.get<EpisodeJson>(`/episodes/${greeted.episode.id}`);
        return episode.status === 'done' ? episode : undefined;
      });
      expect(done?.summary).toBe('Hello, Ada!');

      // The filter lets the paying plan through only; events are read in publish order, so once the
      // second one's episode is done the first one has been heard and passed over.
      await post(node, '/signups', { email: 'free@example.com', plan: 'free' });
      await post(node, '/signups', { email: 'ada@example.com', plan: 'pro' });
      const welcomes = async () =>
        (
          await db.query<{ status: string; summary: string }>(
            `SELECT status, summary FROM cyclium_episodes WHERE expectation_id = 'welcome'`,
          )
        ).rows;
      await waitFor('the welcome episode to finish', async () =>
        (await welcomes()).some((e) => e.status === 'done'),
      );
      expect(await welcomes()).toEqual([
        { status: 'done', summary: 'welcomed ada@example.com to pro' },
      ]);

      await node.stop('SIGTERM');
      // Nest re-raises the signal once its shutdown hooks have run.
      expect(node.process.signalCode).toBe('SIGTERM');
      expect(node.output()).toMatch(/Nest application successfully started/);
      expect(node.output()).not.toMatch(/\bERROR\b/);
      const left = await db.query(
        `SELECT (SELECT count(*) FROM cyclium_nodes WHERE node_identity = $1)::int AS nodes,
              (SELECT count(*) FROM cyclium_work_claims WHERE state = 'claimed')::int AS claims,
              (SELECT count(*) FROM cyclium_episodes WHERE status NOT IN ('done'))::int AS unfinished`,
        [`adopter-${kind}`],
      );
      expect(left.rows[0]).toEqual({ nodes: 0, claims: 0, unfinished: 0 });
    },
    90_000,
  );
});
