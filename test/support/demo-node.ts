import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '@cyclium/nestjs/testing';
import { waitFor } from './wait-for.js';

const DEMO_MAIN = fileURLToPath(new URL('../../apps/demo/dist/main.js', import.meta.url));

/** What a crashing node prints: an 'error' event nobody listened to, a rejection nobody handled. */
const CRASH_MARKERS = [
  /Unhandled 'error' event/,
  /UnhandledPromiseRejection/,
  /unhandledRejection/,
  /uncaughtException/,
];

const faults: string[] = [];

/** Node processes that crashed (an error exit code, or a crash printed) since the last call (see fault-guard.ts). */
export function takeNodeFaults(): string[] {
  return faults.splice(0);
}

function tail(output: string): string {
  return output.split('\n').slice(-40).join('\n');
}

export interface DemoNode {
  port: number;
  process: ChildProcess;
  output(): string;
  get<T>(path: string): Promise<T>;
  /** Sends `signal` and waits for the process to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * A real demo node process (the compiled app: npm test builds first), healthy before this resolves.
 * Variables set to `undefined` in `env` are removed from the child's environment.
 */
export function startDemoNode(
  databaseUrl: string,
  env: Record<string, string | undefined> = {},
): Promise<DemoNode> {
  return startNodeProcess(DEMO_MAIN, databaseUrl, {
    env: { DEMO_DB_POOL: '3', ...env },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

export interface NodeProcessOptions {
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** True once the node answers; polled until it is, for up to `readyTimeoutMs` (30 s). */
  ready: (node: DemoNode) => Promise<boolean>;
  readyTimeoutMs?: number;
  /** Each chunk the node prints, as it comes (its output so far is `output()` once started). */
  onOutput?: (chunk: string) => void;
}

/** Any Nest app's compiled `main` as a real process on a free port, watched by the fault guard. */
export async function startNodeProcess(
  main: string,
  databaseUrl: string,
  options: NodeProcessOptions,
): Promise<DemoNode> {
  const port = await freePort();
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    NO_COLOR: '1',
  };
  for (const [name, value] of Object.entries(options.env ?? {})) {
    if (value === undefined) delete childEnv[name];
    else childEnv[name] = value;
  }
  const child = spawn(process.execPath, [main], {
    env: childEnv,
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const heard = (chunk: string) => {
    output += chunk;
    options.onOutput?.(chunk);
  };
  child.stdout.setEncoding('utf8').on('data', heard);
  child.stderr.setEncoding('utf8').on('data', heard);
  let booted = false;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      // Tests end nodes with signals (SIGTERM drains, SIGKILL crashes on purpose); a node that
      // exits with an error code, or prints a crash, did so on its own.
      const crashed =
        (code !== null && code !== 0) || CRASH_MARKERS.some((marker) => marker.test(output));
      if (booted && crashed)
        faults.push(`node on port ${port} crashed (${signal ?? `code ${code}`}):\n${tail(output)}`);
      resolve();
    }),
  );

  const node: DemoNode = {
    port,
    process: child,
    output: () => output,
    get: async <T>(path: string) => {
      const response = await fetch(`http://127.0.0.1:${port}${path}`);
      if (!response.ok) throw new Error(`GET ${path} → ${response.status}`);
      return (await response.json()) as T;
    },
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
  try {
    await waitFor(
      `node on port ${port} to answer`,
      async () => {
        if (child.exitCode !== null)
          throw new Error(`exited with code ${child.exitCode}:\n${output}`);
        return options.ready(node);
      },
      options.readyTimeoutMs ?? 30_000,
      100,
    );
  } catch (error) {
    await node.stop('SIGKILL');
    throw new Error(
      `${error instanceof Error ? error.message : String(error)}\n--- its output:\n${tail(output)}`,
      { cause: error },
    );
  }
  booted = true;
  return node;
}
