import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { outputTail, waitWhileRunning } from './wait-for.js';

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

/** How often a node whose port was taken before it listened is started again, on another one. */
const PORT_ATTEMPTS = 3;

/**
 * Any Nest app's compiled `main` as a real process on a free port, watched by the fault guard. The
 * port freePort hands out can be taken (another listener, a connection's local port) before the
 * app binds it: the node counts as ready only once its own process listens there, and a start
 * that met EADDRINUSE is made again on another port.
 */
export async function startNodeProcess(
  main: string,
  databaseUrl: string,
  options: NodeProcessOptions,
): Promise<DemoNode> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(main, databaseUrl, options);
    } catch (error) {
      // The demo says so in its own words ("port N is in use"); another app may print the code.
      if (attempt >= PORT_ATTEMPTS || !/EADDRINUSE|port \d+ is in use/.test(String(error)))
        throw error;
    }
  }
}

/** A tuple of node starts, each resolved: `[a, b]` destructures without a cast. */
export type Started<T extends ReadonlyArray<Promise<DemoNode>>> = {
  -readonly [K in keyof T]: Awaited<T[K]>;
};

/**
 * Every start of `starts`, begun together: the nodes in order once all are up. Should one fail, the
 * others that did start are killed before its error is thrown, so no node of a test that could not
 * begin outlives it and writes into the next test's database.
 */
export async function startAll<const T extends ReadonlyArray<Promise<DemoNode>>>(
  starts: T,
): Promise<Started<T>> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  const up = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  // Every start fulfilled, in order: the tuple the caller passed, each promise resolved.
  if (failed === undefined) return up as Started<T>;
  await Promise.all(up.map((node) => node.stop('SIGKILL')));
  throw failed.reason;
}

/**
 * True when process `pid` itself listens on TCP port `port`, any address (Linux /proc; true where
 * there is none), so another listener's answer on that port never passes for the node's.
 */
function listensOn(pid: number | undefined, port: number): boolean {
  if (!existsSync('/proc/net/tcp')) return true;
  if (pid === undefined) return false;
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const inodes = ['/proc/net/tcp', '/proc/net/tcp6']
    .filter((table) => existsSync(table))
    .flatMap((table) => readFileSync(table, 'utf8').split('\n').slice(1))
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields[1]?.endsWith(suffix) && fields[3] === '0A')
    .map((fields) => `socket:[${fields[9]}]`);
  if (inodes.length === 0) return false;
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false; // it exited
  }
  return fds.some((fd) => {
    try {
      return inodes.includes(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      return false;
    }
  });
}

async function startOnce(
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
        faults.push(
          `node on port ${port} crashed (${signal ?? `code ${code}`}):\n${outputTail(output)}`,
        );
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
    await waitWhileRunning(
      `node on port ${port} to answer`,
      child,
      () => output,
      async () => listensOn(child.pid, port) && (await options.ready(node)),
      options.readyTimeoutMs ?? 30_000,
    );
  } catch (error) {
    await node.stop('SIGKILL');
    throw error;
  }
  booted = true;
  return node;
}
