import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../scripts/screenshots.mjs', import.meta.url));
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** A PNG's width and height, from its IHDR chunk (the first, right after the signature). */
function pngSize(bytes: Buffer): { width: number; height: number } {
  expect(bytes.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
  expect(bytes.subarray(12, 16).toString('latin1')).toBe('IHDR');
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

/**
 * `npm run docs:screenshots` end to end, into a temporary folder (SCREENSHOTS_DIR) instead of
 * docs/images/: its own demo cluster, the activity, Chromium and the cleanup all work, so a change
 * to the page or the demo that breaks the script shows here rather than at the next regeneration.
 */
describe('scripts/screenshots.mjs', () => {
  let out: string | undefined;

  afterAll(async () => {
    if (out) await rm(out, { recursive: true, force: true });
  });

  it('writes the main view, an episode and the cluster view at 1440×900, and stops its cluster', async () => {
    out = await mkdtemp(join(tmpdir(), 'cyclium-screenshots-test-'));
    const child = spawn(process.execPath, [SCRIPT], {
      env: { ...process.env, SCREENSHOTS_DIR: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    // The script's own deadlines (150 s in all) end it; the test's timeout is the backstop.
    const code = await new Promise<number | null>((resolve) =>
      child.once('exit', (exitCode) => resolve(exitCode)),
    );
    expect({ code, output }).toEqual({ code: 0, output: expect.stringContaining('done in') });

    expect((await readdir(out)).sort()).toEqual([
      'ops-cluster.png',
      'ops-episode.png',
      'ops-main.png',
    ]);
    for (const name of ['ops-main.png', 'ops-episode.png', 'ops-cluster.png']) {
      expect(pngSize(await readFile(join(out, name)))).toEqual({ width: 1440, height: 900 });
    }
    // Its cluster is gone with it: no node answers on its ports, and its data folder is removed.
    const [, from, dataRoot] = /on ports (\d+)-\d+ \(data in (.+)\)/.exec(output) ?? [];
    expect(dataRoot).toBeDefined();
    expect(existsSync(dataRoot as string)).toBe(false);
    for (let port = Number(from); port < Number(from) + 3; port++) {
      await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
    }
  }, 180_000);
});
