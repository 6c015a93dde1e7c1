/**
 * The chaos soak's demo nodes (apps/demo/dist/main.js, real processes), by slot, under a supervisor
 * that starts a node again a second after it exits on its own. Every exit is recorded with whether
 * the soak asked for it (its kill -9, or the drain at the end) and, when not, the node's last lines.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { freePort } from '@cyclium/nestjs/testing';

const DEMO_MAIN = fileURLToPath(new URL('../../../apps/demo/dist/main.js', import.meta.url));
const SUPERVISOR_DELAY_MS = 1_000;

/** Short timings so crashes and takeovers happen within seconds (as the cluster tests use). */
const DEMO_TIMINGS = {
  DEMO_LEASE_SECONDS: '3',
  DEMO_SETTLE_MS: '500',
  DEMO_STALE_AFTER_MS: '3000',
  DEMO_RECOVERY_INTERVAL_MS: '1000',
  DEMO_SHUTDOWN_MS: '2000',
  DEMO_JITTER_MS: '20',
  DEMO_NODE_BEAT_MS: '1000',
  DEMO_TRIGGER_POLL_MS: '1000',
  DEMO_DB_POOL: '4',
};

export interface ChaosExit {
  at: number;
  slot: number;
  nodeId: string;
  code: number | null;
  signal: string | null;
  requested: boolean;
  /** It had not answered HTTP yet. */
  duringBoot: boolean;
  tail: string[];
}

interface Running {
  child: ChildProcess;
  nodeId: string;
  port: number;
  answered: boolean;
  requested: boolean;
  lines: string[];
}

export class ChaosNodes {
  readonly exits: ChaosExit[] = [];
  readonly boots: Array<{ at: number; slot: number; nodeId: string }> = [];
  private readonly running = new Map<number, Running>();
  private readonly generation = new Map<number, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;

  constructor(
    private readonly databaseUrl: string,
    private readonly log: Writable,
  ) {}

  /** Starts `slot`'s node (a new identity with `fresh`); the supervisor keeps it up from now on. */
  async start(slot: number, fresh = false): Promise<void> {
    if (this.stopped) return;
    const generation = (this.generation.get(slot) ?? 0) + (fresh ? 1 : 0);
    this.generation.set(slot, generation);
    const nodeId = `chaos-${slot}-g${generation}`;
    const port = await freePort();
    const env = {
      ...process.env,
      ...DEMO_TIMINGS,
      DATABASE_URL: this.databaseUrl,
      PORT: String(port),
      CYCLIUM_NODE_ID: nodeId,
      NO_COLOR: '1',
    };
    const child = spawn(process.execPath, [DEMO_MAIN], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const node: Running = { child, nodeId, port, answered: false, requested: false, lines: [] };
    this.running.set(slot, node);
    this.boots.push({ at: Date.now(), slot, nodeId });
    const output = (chunk: Buffer) => {
      for (const line of chunk
        .toString()
        .split('\n')
        .filter((l) => l.length > 0)) {
        this.log.write(`${new Date().toISOString()} [${nodeId}] ${line}\n`);
        node.lines.push(line);
      }
      node.lines.splice(0, Math.max(0, node.lines.length - 20));
    };
    child.stdout.on('data', output);
    child.stderr.on('data', output);
    child.on('exit', (code, signal) => {
      const exit = {
        at: Date.now(),
        slot,
        nodeId,
        code,
        signal,
        requested: node.requested,
        duringBoot: !node.answered,
        tail: [...node.lines],
      };
      this.exits.push(exit);
      if (this.running.get(slot) === node) this.running.delete(slot);
      if (node.requested || this.stopped) return;
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        if (!this.running.has(slot)) void this.start(slot);
      }, SUPERVISOR_DELAY_MS);
      this.timers.add(timer);
    });
    void this.watch(node);
  }

  /** kill -9 of `slot`'s node; its replacement starts at once (a new identity with `fresh`). */
  async kill(slot: number, fresh: boolean): Promise<string | null> {
    const node = this.running.get(slot);
    if (!node) return null;
    node.requested = true;
    const gone = new Promise<void>((resolve) => node.child.once('exit', () => resolve()));
    node.child.kill('SIGKILL');
    await gone;
    await this.start(slot, fresh);
    return node.nodeId;
  }

  /** The ports of nodes that answer HTTP. */
  ports(): number[] {
    return [...this.running.values()].filter((n) => n.answered).map((n) => n.port);
  }

  /** Every slot in `slots` has a node that answers HTTP. */
  allAnswer(slots: number[]): boolean {
    return slots.every((slot) => this.running.get(slot)?.answered);
  }

  /** Drains every node (SIGTERM) and waits for them; the supervisor stops. */
  async stopAll(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    const nodes = [...this.running.values()];
    await Promise.all(
      nodes.map(
        (node) =>
          new Promise<void>((resolve) => {
            node.requested = true;
            if (node.child.exitCode !== null || node.child.signalCode !== null) return resolve();
            node.child.once('exit', () => resolve());
            node.child.kill(signal);
            const hard = setTimeout(() => node.child.kill('SIGKILL'), 20_000);
            node.child.once('exit', () => clearTimeout(hard));
          }),
      ),
    );
  }

  private async watch(node: Running): Promise<void> {
    while (!node.answered && node.child.exitCode === null && node.child.signalCode === null) {
      // Any HTTP answer (a 503 while the database is away too) means the node booted and listens.
      node.answered = await fetch(`http://127.0.0.1:${node.port}/health/live`).then(
        () => true,
        () => false,
      );
      if (!node.answered) await new Promise((r) => setTimeout(r, 200));
    }
  }
}
