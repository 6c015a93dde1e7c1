import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { freePort } from './support/free-port.js';
import { databaseUrl, freshDatabase, pool, serverUrl } from './support/database.js';

const DEMO_MAIN = fileURLToPath(new URL('../apps/demo/dist/main.js', import.meta.url));

/** Every node started here, killed in afterAll should a test end before its node did. */
const children = new Set<ChildProcess>();

interface Run {
  code: number | null;
  ms: number;
  output: string;
}

/** Runs a demo node to its exit (SIGKILL after 20 s: a node still retrying then has failed the test). */
async function runNode(env: Record<string, string>): Promise<Run> {
  const started = performance.now();
  const child = spawn(process.execPath, [DEMO_MAIN], {
    env: {
      ...process.env,
      PORT: String(await freePort()),
      NO_COLOR: '1',
      DEMO_DB_POOL: '2',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(kill);
  return { code, ms: performance.now() - started, output };
}

/** The run failed fast, in one error line matching `cause`, with no stack trace anywhere. */
function expectOneLineFailure(run: Run, cause: RegExp): void {
  const errors = run.output.split('\n').filter((line) => /\bERROR\b/.test(line));
  expect({ code: run.code, errors }).toEqual({ code: 1, errors: [expect.stringMatching(cause)] });
  expect(errors[0]).toContain('could not start: ');
  expect(run.output).not.toMatch(/^\s+at /m);
  // TypeORM's own connect took 28.5 s here (ten retries); Cyclium's takes one attempt.
  expect(run.ms).toBeLessThan(15_000);
}

describe('a demo node that cannot start', () => {
  let squatter: Server | undefined;

  afterAll(() => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    squatter?.close();
  });

  it('fails at once, in one line naming the cause, on a wrong password, an unknown database or a malformed DATABASE_URL', async () => {
    const wrongPassword = new URL(serverUrl());
    wrongPassword.password = 'not-the-password';
    const [password, database, malformed] = await Promise.all([
      runNode({ DATABASE_URL: wrongPassword.toString() }),
      runNode({ DATABASE_URL: databaseUrl('cyclium_no_such_database') }),
      runNode({ DATABASE_URL: 'not a url' }),
    ]);
    expectOneLineFailure(
      password,
      new RegExp(
        `password authentication failed for user "${wrongPassword.username}" \\(user ${wrongPassword.username} at 127\\.0\\.0\\.1:`,
      ),
    );
    expectOneLineFailure(database, /database "cyclium_no_such_database" does not exist/);
    // What waiting cannot fix is not waited for (startupWaitMs is for a database that is not up yet).
    for (const run of [password, database])
      expect(run.output).not.toContain('the database is not available yet');
    expectOneLineFailure(
      malformed,
      /DATABASE_URL is not a postgres:\/\/ or postgresql:\/\/ connection URL/,
    );
  }, 40_000);

  it('says which port is in use, exits 1 and leaves no cyclium_nodes row behind', async () => {
    const url = await freshDatabase();
    const port = await freePort();
    squatter = createServer();
    await new Promise<void>((resolve) => squatter?.listen(port, '127.0.0.1', resolve));
    const run = await runNode({
      DATABASE_URL: url,
      PORT: String(port),
      CYCLIUM_NODE_ID: 'port-taken',
    });
    expectOneLineFailure(run, new RegExp(`port ${port} is in use`));
    // It had registered (boot comes before the port): closing the app on the way out removed the row.
    expect(run.output).toContain('Nest application successfully started');
    const db = pool(url, 1);
    try {
      const { rows } = await db.query(
        `SELECT node_identity FROM cyclium_nodes WHERE node_identity = $1`,
        ['port-taken'],
      );
      expect(rows).toEqual([]);
    } finally {
      await db.end();
    }
  }, 30_000);
});
