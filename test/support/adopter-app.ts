import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The page whose example app an adopter builds: `docs/getting-started.md`. */
export const GETTING_STARTED = join(REPO_ROOT, 'docs/getting-started.md');

const run = promisify(execFile);

/** What an adopter copies out of the getting-started page. */
export interface GettingStartedExample {
  /** `src/…` path → the code block that names it on its first line. */
  files: Map<string, string>;
  /** The `// tsconfig.json` block, comments included (tsc reads JSON with comments). */
  tsconfig: string;
  /** The packages of `npm install …` and of `npm install --save-dev …`. */
  dependencies: string[];
  devDependencies: string[];
}

export function gettingStartedExample(readme: string): GettingStartedExample {
  const blocks = [...readme.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map(([, lang, body]) => ({
    lang,
    body,
  }));
  const files = new Map<string, string>();
  let tsconfig: string | undefined;
  let dependencies: string[] | undefined;
  let devDependencies: string[] | undefined;
  for (const { lang, body } of blocks) {
    const first = body.split('\n', 1)[0].trim();
    const file = /^\/\/ (src\/[\w./-]+\.ts)$/.exec(first);
    if (lang === 'ts' && file) files.set(file[1], body);
    if (lang === 'jsonc' && first === '// tsconfig.json') tsconfig = body;
    if (lang === 'sh') {
      // A command may go on over several lines, each but the last ending in a backslash.
      for (const line of body.replace(/\\\n/g, ' ').split('\n')) {
        const words = line.trim().split(/\s+/);
        if (words[0] !== 'npm' || words[1] !== 'install') continue;
        if (words[2] === '--save-dev') devDependencies = words.slice(3);
        else if (words[2] === '@cyclium/nestjs') dependencies = words.slice(2);
      }
    }
  }
  if (files.size === 0 || !tsconfig || !dependencies || !devDependencies) {
    throw new Error(
      'docs/getting-started.md lost its example: src/ blocks, the tsconfig block or npm install',
    );
  }
  return { files, tsconfig, dependencies, devDependencies };
}

/** JSON with `//` line comments (as in the page's tsconfig block) to a value. */
export function parseJsonc(text: string): Record<string, unknown> {
  return JSON.parse(text.replace(/\/\/.*$/gm, '')) as Record<string, unknown>;
}

export interface PackedLibrary {
  tarball: string;
  size: number;
  files: string[];
}

/** `npm pack` of the library workspace (its prepack builds it first) into `destination`. */
export async function packLibrary(destination: string, dryRun = false): Promise<PackedLibrary> {
  const args = [
    'pack',
    '-w',
    'libs/cyclium',
    '--json',
    ...(dryRun ? ['--dry-run'] : ['--pack-destination', destination]),
  ];
  const { stdout } = await run('npm', args, { cwd: REPO_ROOT, maxBuffer: 16 * 1024 * 1024 });
  // npm prints the lifecycle scripts' output before the JSON.
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as Array<{
    filename: string;
    size: number;
    files: Array<{ path: string }>;
  }>;
  return {
    tarball: join(destination, packed.filename),
    size: packed.size,
    files: packed.files.map((f) => f.path),
  };
}

/** The version this repository installed, so the adopter install is served from the npm cache. */
async function installedVersion(name: string): Promise<string> {
  const manifest = JSON.parse(
    await readFile(join(REPO_ROOT, 'node_modules', name, 'package.json'), 'utf8'),
  ) as { version: string };
  return manifest.version;
}

/**
 * One install in `root` that the apps below it share (Node and tsc both look up the tree): the
 * page's packages, with the tarball standing in for `@cyclium/nestjs`.
 */
export async function installDependencies(
  root: string,
  tarball: string,
  example: GettingStartedExample,
): Promise<void> {
  const pin = async (names: string[]) =>
    Object.fromEntries(
      await Promise.all(
        names.map(async (name) => [
          name,
          name === '@cyclium/nestjs' ? `file:${tarball}` : await installedVersion(name),
        ]),
      ),
    );
  const manifest = {
    name: 'cyclium-adopter',
    private: true,
    dependencies: await pin(example.dependencies),
    devDependencies: await pin(example.devDependencies),
  };
  await writeFile(join(root, 'package.json'), JSON.stringify(manifest, null, 2));
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd: root,
    maxBuffer: 16 * 1024 * 1024,
    timeout: 120_000,
  });
}

export type ModuleKind = 'esm' | 'cjs';

/**
 * A new app in `dir` made of the page's files, as an ES module app (`"type": "module"`, the
 * page's tsconfig as written) or as a CommonJS one (no type, `module: commonjs` with the old
 * `node` resolution most existing Nest apps still compile with).
 */
export async function writeApp(
  dir: string,
  kind: ModuleKind,
  example: GettingStartedExample,
): Promise<void> {
  await mkdir(join(dir, 'src'), { recursive: true });
  for (const [path, body] of example.files) await writeFile(join(dir, path), body);
  const manifest = {
    name: `adopter-${kind}`,
    private: true,
    type: kind === 'esm' ? 'module' : 'commonjs',
  };
  await writeFile(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  if (kind === 'esm') {
    await writeFile(join(dir, 'tsconfig.json'), example.tsconfig);
    return;
  }
  const tsconfig = parseJsonc(example.tsconfig) as { compilerOptions: Record<string, unknown> };
  Object.assign(tsconfig.compilerOptions, {
    module: 'commonjs',
    moduleResolution: 'node10',
    ignoreDeprecations: '6.0',
  });
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify(tsconfig, null, 2));
}

/** The adopter's own TypeScript (from the page's dev install), on the app's tsconfig. */
export async function compileApp(root: string, dir: string): Promise<void> {
  try {
    await run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', dir], {
      cwd: dir,
    });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`tsc failed in ${dir}:\n${stdout ?? ''}${stderr ?? ''}`, { cause: error });
  }
}

/** `npx typeorm migration:run -d dist/data-source.js`, as the page's second way has it. */
export async function runMigrationsCli(
  root: string,
  dir: string,
  databaseUrl: string,
): Promise<string> {
  const { stdout } = await run(
    process.execPath,
    [join(root, 'node_modules/typeorm/cli.js'), 'migration:run', '-d', 'dist/data-source.js'],
    {
      cwd: dir,
      env: { ...process.env, DATABASE_URL: databaseUrl },
    },
  );
  return stdout;
}
