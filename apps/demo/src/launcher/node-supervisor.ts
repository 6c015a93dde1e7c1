import { spawn, type ChildProcess } from 'node:child_process';

export interface NodeSpec {
  id: string;
  port: number;
  env: NodeJS.ProcessEnv;
}

/** At most this many restarts of one node within RESTART_WINDOW_MS; then it is left down. */
const MAX_RESTARTS = 5;
const RESTART_WINDOW_MS = 60_000;

/**
 * Nest's own boot lines (modules loaded, every route mapped): about fifty per node, which bury the
 * launcher's few useful lines. DEMO_VERBOSE_BOOT=1 shows them.
 */
const BOOT_NOISE = /\bLOG \[(InstanceLoader|RoutesResolver|RouterExplorer|NestFactory)\]/;

function prefixLines(
  stream: NodeJS.ReadableStream | null,
  prefix: string,
  out: NodeJS.WritableStream,
  quiet: boolean,
): void {
  let pending = '';
  stream?.setEncoding('utf8');
  stream?.on('data', (chunk: string) => {
    const lines = (pending + chunk).split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines)
      if (!quiet || !BOOT_NOISE.test(line)) out.write(`${prefix} ${line}\n`);
  });
}

const gone = (node: ChildProcess) => node.exitCode !== null || node.signalCode !== null;

/**
 * Healthy means *this* child answers: /node must report its identity and pid, so a stale process
 * still holding the port (a previous cluster, say) cannot pass for a node that failed to bind.
 */
export async function waitHealthy(
  id: string,
  port: number,
  node: ChildProcess,
  deadlineMs: number,
): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (gone(node)) {
      throw new Error(
        `${id} (port ${port}) failed to start: it exited with ${node.signalCode ?? `code ${node.exitCode}`} (see its log above)`,
      );
    }
    const healthy = await fetch(`http://127.0.0.1:${port}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (healthy) {
      const who = await fetch(`http://127.0.0.1:${port}/node`)
        .then((r) => r.json() as Promise<{ identity?: string; pid?: number }>)
        .catch(() => ({}) as { identity?: string; pid?: number });
      if (who.identity === id && who.pid === node.pid) return;
      if (who.pid !== undefined && who.pid !== node.pid) {
        throw new Error(
          `${id} could not take port ${port}: another process (pid ${who.pid}, ${who.identity ?? 'unknown'}) answers there`,
        );
      }
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${id} (port ${port}) was not healthy within ${deadlineMs} ms`);
}

interface Supervised {
  spec: NodeSpec;
  child: ChildProcess;
  /** When it was restarted, within the last RESTART_WINDOW_MS. */
  restarts: number[];
  /** Left down after too many restarts. */
  abandoned: boolean;
  timer?: NodeJS.Timeout;
}

/**
 * Runs the demo nodes. Once the cluster is up, a node that exits for any reason but the
 * launcher's own stop is started again (after 1 s per recent restart, at most MAX_RESTARTS a
 * minute): `kill <pid>` is how to restart one by hand, since SIGTERM drains it first.
 */
export class NodeSupervisor {
  private readonly nodes: Supervised[] = [];
  private restarting = false;
  private stopping = false;

  constructor(
    private readonly entry: string,
    private readonly say: (line: string) => void,
    /** Called once every node has been left down. */
    private readonly allDown: () => void,
    /** How long a restarted node may take to answer: it waits for a database that is away (a failover) first. */
    private readonly bootDeadlineMs = 60_000,
  ) {}

  start(specs: NodeSpec[]): void {
    for (const spec of specs) {
      const node: Supervised = { spec, child: this.spawn(spec), restarts: [], abandoned: false };
      this.nodes.push(node);
      this.watch(node);
    }
  }

  /** Resolves when every node answers as itself; rejects with one message per node that did not. */
  async waitHealthy(deadlineMs: number): Promise<string[]> {
    const started = await Promise.allSettled(
      this.nodes.map(({ spec, child }) => waitHealthy(spec.id, spec.port, child, deadlineMs)),
    );
    return started.flatMap((result) =>
      result.status === 'rejected' ? [(result.reason as Error).message] : [],
    );
  }

  /** From now on a node that exits is restarted. */
  restartOnExit(): void {
    this.restarting = true;
  }

  pid(id: string): number | undefined {
    return this.nodes.find((node) => node.spec.id === id)?.child.pid;
  }

  /** SIGTERM to every node (SIGKILL after 20 s), resolved once all have exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const node of this.nodes) clearTimeout(node.timer);
    await Promise.all(
      this.nodes.map(
        ({ child }) =>
          new Promise<void>((done) => {
            if (gone(child)) return done();
            const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
            child.once('exit', () => {
              clearTimeout(kill);
              done();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
  }

  private spawn(spec: NodeSpec): ChildProcess {
    // Detached: a terminal's Ctrl-C reaches only the launcher, which then stops the nodes in order.
    const child = spawn(process.execPath, [this.entry], {
      env: spec.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const quiet = spec.env.DEMO_VERBOSE_BOOT !== '1';
    prefixLines(child.stdout, `[${spec.id}]`, process.stdout, quiet);
    prefixLines(child.stderr, `[${spec.id}]`, process.stderr, quiet);
    return child;
  }

  private watch(node: Supervised): void {
    node.child.once('exit', (code, signal) => {
      if (this.stopping) return;
      const how = signal ?? `code ${code}`;
      // Before the cluster is up, waitHealthy reports the failure and the launcher stops.
      if (!this.restarting) return this.say(`${node.spec.id} exited unexpectedly (${how})`);
      const now = Date.now();
      node.restarts = node.restarts.filter((at) => now - at < RESTART_WINDOW_MS);
      if (node.restarts.length >= MAX_RESTARTS) {
        node.abandoned = true;
        this.say(
          `${node.spec.id} exited (${how}) after ${MAX_RESTARTS} restarts within a minute; leaving it down (see its log above)`,
        );
        if (this.nodes.every((n) => n.abandoned)) this.allDown();
        return;
      }
      node.restarts.push(now);
      const delayMs = 1000 * node.restarts.length;
      this.say(`${node.spec.id} exited (${how}); restarting it in ${delayMs / 1000} s`);
      // Otherwise the restart looks hung: the new process is silent while it waits.
      const beatMs = Number(node.spec.env.DEMO_NODE_BEAT_MS ?? 15_000);
      this.say(
        `${node.spec.id}'s new process waits up to ${(2 * beatMs) / 1000} s (two node beats) for ` +
          `the old one's beat to stop before it takes the identity: one identity never runs twice`,
      );
      node.timer = setTimeout(() => this.restart(node), delayMs);
    });
  }

  private restart(node: Supervised): void {
    if (this.stopping) return;
    node.child = this.spawn(node.spec);
    this.watch(node);
    const { id, port } = node.spec;
    waitHealthy(id, port, node.child, this.bootDeadlineMs).then(
      () => this.say(`${id} is back on http://127.0.0.1:${port} (pid ${node.child.pid})`),
      (error: Error) => this.say(error.message),
    );
  }
}
