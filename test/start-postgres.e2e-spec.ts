import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

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
});
