import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The previous release (tag v0.1.0): the commit a node of this tree must run beside during a rolling deploy. */
export const PREVIOUS_RELEASE = { tag: 'v0.1.0', commit: '6026d4b' };

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FIXTURES = fileURLToPath(new URL('../fixtures/dist/', import.meta.url));
/** What the old node needs of the tree: the library and the compiler settings it extends. */
const OLD_PATHS = ['libs/cyclium', 'tsconfig.base.json'];
const FIXTURE_FILES = ['mixed-node.js', 'racer-support.js'];

export interface PreviousRelease {
  /** The full commit built. */
  commit: string;
  /** The build's root: `libs/cyclium/dist` is the old library, `node_modules/@cyclium/nestjs` links to it. */
  dir: string;
  /** The old library's entry point, as the old node must resolve it. */
  entry: string;
  /** `test/fixtures/mixed-node.ts` compiled, copied under `dir` so that `@cyclium/nestjs` resolves to the old build. */
  main: string;
}

/** The full commit of the previous release, or null when this clone lacks it (a shallow clone, a tarball). */
export function previousReleaseCommit(): string | null {
  try {
    return execFileSync(
      'git',
      ['rev-parse', '--verify', '--quiet', `${PREVIOUS_RELEASE.commit}^{commit}`],
      {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      },
    ).trim();
  } catch {
    return null;
  }
}

/**
 * The previous release's library, built once per commit under `node_modules/.cache/cyclium-v0.1.0/`
 * (git archive of its tree, compiled with this tree's TypeScript; its runtime dependencies are the
 * same packages, found in the repository's node_modules above the cache), with this tree's compiled
 * mixed-node fixture copied beside it. Built in a scratch directory and renamed into place, so a
 * run interrupted mid-build or two runs at once never leave a half build behind.
 */
export function previousRelease(commit: string): PreviousRelease {
  const cache = join(ROOT, 'node_modules', '.cache', `cyclium-${PREVIOUS_RELEASE.tag}`);
  const dir = join(cache, commit);
  if (!existsSync(join(dir, 'BUILT'))) {
    const scratch = join(cache, `${commit}.building-${process.pid}`);
    rmSync(scratch, { recursive: true, force: true });
    mkdirSync(scratch, { recursive: true });
    try {
      const tree = execFileSync('git', ['archive', '--format=tar', commit, ...OLD_PATHS], {
        cwd: ROOT,
        maxBuffer: 256 * 1024 * 1024,
      });
      execFileSync('tar', ['-x', '-C', scratch], { input: tree });
      // Only JavaScript: the old node needs no declarations, maps or build info.
      execFileSync(
        process.execPath,
        [
          join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
          '-p',
          join(scratch, 'libs', 'cyclium', 'tsconfig.lib.json'),
          ...[
            '--composite',
            'false',
            '--incremental',
            'false',
            '--declaration',
            'false',
            '--sourceMap',
            'false',
            '--tsBuildInfoFile',
            'null',
          ],
        ],
        { cwd: scratch, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      // A relative link, so it still points into the build once renamed into place.
      mkdirSync(join(scratch, 'node_modules', '@cyclium'), { recursive: true });
      symlinkSync(
        join('..', '..', 'libs', 'cyclium'),
        join(scratch, 'node_modules', '@cyclium', 'nestjs'),
        'dir',
      );
      writeFileSync(join(scratch, 'BUILT'), `${commit}\n`);
      try {
        renameSync(scratch, dir);
      } catch (error) {
        // Another run finished the same build first: use theirs.
        if (!existsSync(join(dir, 'BUILT'))) throw error;
        rmSync(scratch, { recursive: true, force: true });
      }
    } catch (error) {
      rmSync(scratch, { recursive: true, force: true });
      const output = (error as { stdout?: Buffer; stderr?: Buffer }).stdout?.toString() ?? '';
      throw new Error(
        `building ${PREVIOUS_RELEASE.tag} (${commit}) failed: ${(error as Error).message}\n${output}`,
        { cause: error },
      );
    }
  }
  // The fixture is this tree's, so it is copied on every run (a file at a time, each renamed into place).
  const fixtures = join(dir, 'fixtures');
  mkdirSync(fixtures, { recursive: true });
  for (const file of FIXTURE_FILES) {
    const partial = join(fixtures, `${file}.${process.pid}`);
    copyFileSync(join(FIXTURES, file), partial);
    renameSync(partial, join(fixtures, file));
  }
  return {
    commit,
    dir,
    entry: join(dir, 'libs', 'cyclium', 'dist', 'index.js'),
    main: join(fixtures, 'mixed-node.js'),
  };
}
