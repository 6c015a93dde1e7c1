import { describe, expect, it } from '@jest/globals';
import { readFile } from 'node:fs/promises';
import semver from 'semver';

const ROOT = new URL('../', import.meta.url);

const readJson = async <T>(file: string): Promise<T> =>
  JSON.parse(await readFile(new URL(file, ROOT), 'utf8')) as T;

interface Locked {
  engines?: { node?: string } | string[];
}

/**
 * `npm install` on the Node version the README states prints no engine warning: every package in
 * the lock file (the tree `npm ci` installs, dev tools included) accepts the lowest Node that
 * package.json's `engines` allows, and the README says that version.
 */
describe('the Node version the README states', () => {
  it('is the lowest that engines allows, and every locked package accepts it', async () => {
    const manifest = await readJson<{ engines: { node: string } }>('package.json');
    const lowest = semver.minVersion(manifest.engines.node)?.version as string;
    expect(lowest).toBe('20.19.0');
    const readme = await readFile(new URL('README.md', ROOT), 'utf8');
    expect(readme).toContain('Node 20.19');

    const lock = await readJson<{ packages: Record<string, Locked> }>('package-lock.json');
    const refusing = Object.entries(lock.packages)
      .filter(([path]) => path !== '')
      .map(([path, { engines }]) => ({
        path,
        node: Array.isArray(engines) ? undefined : engines?.node,
      }))
      .filter(({ node }) => node !== undefined && !semver.satisfies(lowest, node as string))
      .map(({ path, node }) => `${path} wants node ${node}`);
    expect(refusing).toEqual([]);
  });
});
