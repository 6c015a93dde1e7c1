/**
 * The testing kit as a new app's developer meets it: pack the library, install the tarball into a
 * new ES module app outside this tree with the packages of docs/getting-started.md and of the
 * kit's section of docs/guides/testing-your-actors.md, write exactly that section's files, and run
 * its command line as written: the app compiles and its Jest test passes.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  GETTING_STARTED,
  REPO_ROOT,
  gettingStartedExample,
  installDependencies,
  packLibrary,
} from './support/adopter-app.js';
import { emptyDatabase } from './support/database.js';

const run = promisify(execFile);
const TESTING_PAGE = join(REPO_ROOT, 'docs/guides/testing-your-actors.md');
const SECTION = '## The testing kit';

/** The kit's section of the page: its `// src/` files, its dev install and its command. */
function kitSection(page: string): { files: Map<string, string>; dev: string[]; command: string } {
  const start = page.indexOf(SECTION);
  const end = page.indexOf('\n## ', start + SECTION.length);
  const section = page.slice(start, end === -1 ? undefined : end);
  const files = new Map<string, string>();
  let dev: string[] = [];
  let command = '';
  for (const [, lang, body] of section.matchAll(/```(\w+)\n([\s\S]*?)```/g)) {
    const first = (body as string).split('\n', 1)[0]!.trim();
    const file = /^\/\/ (src\/[\w./-]+\.ts)$/.exec(first);
    if (lang === 'ts' && file) files.set(file[1]!, body as string);
    if (lang === 'sh') {
      for (const line of (body as string).trim().split('\n')) {
        if (line.startsWith('npm install --save-dev ')) dev = line.split(/\s+/).slice(3);
        else command = line;
      }
    }
  }
  if (start === -1 || files.size === 0 || dev.length === 0 || command === '')
    throw new Error(`${TESTING_PAGE} lost the kit's example: its src/ blocks or its commands`);
  return { files, dev, command };
}

describe("the testing kit's Jest example in a new app, as the guide says", () => {
  let root: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'cyclium-kit-adopter-'));
  });

  afterAll(async () => {
    if (root) await rm(root, { recursive: true, force: true });
  });

  it('installs, compiles and passes its example test', async () => {
    const example = gettingStartedExample(await readFile(GETTING_STARTED, 'utf8'));
    const kit = kitSection(await readFile(TESTING_PAGE, 'utf8'));
    const packed = await packLibrary(root);
    await installDependencies(root, packed.tarball, {
      ...example,
      devDependencies: [...example.devDependencies, ...kit.dev],
    });
    // The app is the install's folder, an ES module app with the getting-started tsconfig.
    const manifestPath = join(root, 'package.json');
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as Record<string, unknown>;
    await writeFile(manifestPath, JSON.stringify({ ...manifest, type: 'module' }, null, 2));
    await writeFile(join(root, 'tsconfig.json'), example.tsconfig);
    await mkdir(join(root, 'src'), { recursive: true });
    for (const [path, body] of kit.files) await writeFile(join(root, path), body);

    let output: string;
    try {
      const done = await run('bash', ['-c', kit.command], {
        cwd: root,
        env: { ...process.env, DATABASE_URL: await emptyDatabase('kit_adopter') },
        timeout: 180_000,
        maxBuffer: 16 * 1024 * 1024,
      });
      output = `${done.stdout}${done.stderr}`;
    } catch (error) {
      const { stdout, stderr } = error as { stdout?: string; stderr?: string };
      throw new Error(`${kit.command} failed:\n${stdout ?? ''}${stderr ?? ''}`, { cause: error });
    }
    expect(output).toMatch(/Tests:\s+1 passed, 1 total/);
  }, 400_000);
});
