/**
 * The driver's side of one incarnation of a node: a worker thread or a child process running
 * soak/node, booted, commanded, drained (SIGTERM) or killed (kill -9). A worker is killed with
 * `worker.terminate()`, which runs no hook and drops its timers and work in flight, and its
 * backends are terminated server-side by application_name; a process gets a real SIGKILL.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import pg from 'pg';
import type {
  DriverMessage,
  FaultNodeConfig,
  NodeAnswer,
  NodeCommand,
  NodeMessage,
} from '../node/node-protocol.js';

const WORKER_MAIN = new URL('../node/fault-node.worker.js', import.meta.url);
const PROCESS_MAIN = new URL('../node/fault-node.process.js', import.meta.url);

export interface NodeExit {
  code: number | null;
  signal: string | null;
  /** The driver asked for it (a kill, a drain, a stop at the end). */
  requested: boolean;
  /** It never became ready (boot failed, or it died while booting). */
  duringBoot: boolean;
  reason: string;
}

type Pending = { resolve: (answer: NodeAnswer) => void };

export class NodeHandle {
  readonly ready: Promise<void>;
  readonly exited: Promise<NodeExit>;
  private readonly pending = new Map<number, Pending>();
  private readonly lastLines: string[] = [];
  private nextId = 1;
  private requested = false;
  private isReady = false;
  private gone = false;
  private bootError = '';
  private worker: Worker | undefined;
  private child: ChildProcess | undefined;

  constructor(
    readonly config: FaultNodeConfig,
    readonly kind: 'worker' | 'process',
    log: Writable,
  ) {
    let readyResolve!: () => void;
    let readyReject!: (error: Error) => void;
    this.ready = new Promise<void>(
      (resolve, reject) => ((readyResolve = resolve), (readyReject = reject)),
    );
    this.ready.catch(() => undefined);
    const onMessage = (message: NodeMessage) => {
      if (message.type === 'ready') {
        this.isReady = true;
        readyResolve();
      } else if (message.type === 'boot_failed') {
        this.bootError = `${message.errorName}: ${message.error}`;
        readyReject(new Error(this.bootError));
      } else if (message.type === 'answer') {
        this.pending.get(message.id)?.resolve(message.answer);
        this.pending.delete(message.id);
      }
    };
    const prefix = (chunk: Buffer | string) => {
      const lines = chunk
        .toString()
        .split('\n')
        .filter((l) => l.length > 0);
      for (const line of lines) {
        log.write(`${new Date().toISOString()} [${config.appName}] ${line}\n`);
        this.lastLines.push(line);
      }
      this.lastLines.splice(0, Math.max(0, this.lastLines.length - 30));
    };
    this.exited = new Promise<NodeExit>((resolve) => {
      const ended = (code: number | null, signal: string | null) => {
        this.gone = true;
        for (const [, p] of this.pending)
          p.resolve({ ok: false, error: 'the node is gone', unavailable: false });
        this.pending.clear();
        const duringBoot = !this.isReady;
        const reason = this.bootError || (code !== null ? `exit code ${code}` : `signal ${signal}`);
        readyReject(new Error(`node ${config.appName} ended before it was ready: ${reason}`));
        resolve({ code, signal, requested: this.requested, duringBoot, reason });
      };
      if (kind === 'worker') {
        const worker = new Worker(WORKER_MAIN, { workerData: config, stdout: true, stderr: true });
        this.worker = worker;
        worker.stdout.on('data', prefix);
        worker.stderr.on('data', prefix);
        worker.on('message', onMessage);
        worker.on('error', (error) => prefix(`worker error: ${error.stack ?? error.message}`));
        worker.on('exit', (code) => ended(code, null));
      } else {
        const child = fork(PROCESS_MAIN, [], {
          env: { ...process.env, FAULT_NODE: JSON.stringify(config), NO_COLOR: '1' },
          stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
        });
        this.child = child;
        child.stdout?.on('data', prefix);
        child.stderr?.on('data', prefix);
        child.on('message', (message) => onMessage(message as NodeMessage));
        child.on('error', (error) => prefix(`process error: ${error.message}`));
        child.on('exit', (code, signal) => ended(code, signal));
      }
    });
  }

  /** The node's last lines of output. */
  tail(): string[] {
    return [...this.lastLines];
  }

  get up(): boolean {
    return this.isReady && !this.gone;
  }

  get alive(): boolean {
    return !this.gone;
  }

  /** Sends a command; the answer, or a failure once `timeoutMs` passed or the node went away. */
  command(command: NodeCommand, timeoutMs = 30_000): Promise<NodeAnswer> {
    if (this.gone)
      return Promise.resolve({ ok: false, error: 'the node is gone', unavailable: false });
    const id = this.nextId++;
    return new Promise<NodeAnswer>((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve({ ok: false, error: `no answer within ${timeoutMs} ms`, unavailable: false });
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (answer) => {
          clearTimeout(timer);
          resolve(answer);
        },
      });
      const message: DriverMessage = { id, command };
      if (this.worker) this.worker.postMessage(message);
      else this.child?.send(message);
    });
  }

  /** SIGTERM: the node drains and exits; resolves once it has. */
  async drain(): Promise<NodeExit> {
    this.requested = true;
    if (this.child) {
      this.child.kill('SIGTERM');
    } else if (this.worker) {
      if (this.isReady) {
        await this.command({ cmd: 'drain' }, 60_000);
      }
      await this.worker.terminate();
    }
    return this.exited;
  }

  /** kill -9: nothing of the node runs again, and its connections end. */
  async kill(killBackends: (appName: string) => Promise<void>): Promise<NodeExit> {
    this.requested = true;
    if (this.child) {
      this.child.kill('SIGKILL');
    } else if (this.worker) {
      await this.worker.terminate();
      await killBackends(this.config.appName);
    }
    return this.exited;
  }
}

/** Terminates every backend whose application_name is `appName`, as a dead host's connections end. */
export async function terminateBackends(url: string, appName: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
      [appName],
    );
  } catch {
    // The database is down: the connections are gone with it.
  } finally {
    await client.end().catch(() => undefined);
  }
}
