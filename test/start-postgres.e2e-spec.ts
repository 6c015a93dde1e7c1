import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { waitFor } from './support/wait-for.js';

// The compiled helper (it forks its keeper from the built file next to it), in a process of its
// own whose TMPDIR only this test looks at: Jest's sandbox env does not reach os.tmpdir().
const TESTING = fileURLToPath(new URL('../libs/cyclium/dist/testing/index.js', import.meta.url));
// CommonJS eval (no --input-type flag, which the forked keeper would inherit and choke on).
const FAILING_START = `
  import(${JSON.stringify(TESTING)})
    .then(({ startPostgres }) => startPostgres({ settings: { shared_buffers: 'plenty' } }))
    .then(
      () => { console.log('started'); process.exit(2); },
      (error) => console.log(error.message),
    );`;

// Starts a server and keeps the process alive until it is killed.
const STARTS_AND_WAITS = `
  import(${JSON.stringify(TESTING)})
    .then(({ startPostgres }) => startPostgres())
    .then(() => { console.log('started'); setInterval(() => undefined, 1000); });`;

describe('startPostgres', () => {
  let scratchRoot: string;

  beforeAll(async () => {
    scratchRoot = await mkdtemp(join(tmpdir(), 'cyclium-start-postgres-'));
  });

  afterAll(async () => {
    await rm(scratchRoot, { recursive: true, force: true });
  });

  it('leaves no scratch folder behind when the server cannot start', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', FAILING_START], {
      env: { ...process.env, TMPDIR: scratchRoot },
      timeout: 60_000,
    });
    expect(stdout).toMatch(/embedded PostgreSQL failed to start/);
    expect(await readdir(scratchRoot)).toEqual([]);
  });

  it('leaves no server and no scratch folder behind when the process that started it is killed', async () => {
    const child = spawn(process.execPath, ['-e', STARTS_AND_WAITS], {
      env: { ...process.env, TMPDIR: scratchRoot },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await waitFor(
        'the server to start',
        () =>
          new Promise<boolean>((resolve) =>
            child.stdout.once('data', (chunk: Buffer) =>
              resolve(chunk.toString().includes('started')),
            ),
          ),
        60_000,
      );
      expect(await readdir(scratchRoot)).toHaveLength(1);
      child.kill('SIGKILL');
      // The keeper notices its parent is gone, stops the server, and only then removes the folder.
      await waitFor(
        'the scratch folder to go',
        async () => (await readdir(scratchRoot)).length === 0,
        30_000,
        100,
      );
    } finally {
      child.kill('SIGKILL');
    }
  }, 120_000);
});
