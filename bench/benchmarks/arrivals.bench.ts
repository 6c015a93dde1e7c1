import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  clock,
  type ArrivalsReply,
  type ArrivalsRequest,
  type ArrivalsUnit,
} from '../support/arrivals-protocol.js';
import { cpuWindow, type CpuWindow } from '../support/cpu-meter.js';
import { printTable } from '../support/measure.js';

const WORKER = fileURLToPath(new URL('../support/arrivals-node.js', import.meta.url));
const LOADS: readonly number[] = process.env.ARRIVALS_LOADS
  ? process.env.ARRIVALS_LOADS.split(',').map(Number)
  : [0.25, 0.5, 0.9];
const N = 2_000;
const CLOSED_N = { 1: 300, 16: 2_000 } as const;
const WARM_UP = 300;
/** Trigger ids, unique across the run. */
let nextId = 0;

interface Worker {
  child: ChildProcess;
  request(request: ArrivalsRequest): void;
  next(kind: ArrivalsReply['kind']): Promise<ArrivalsReply>;
  onReply(listener: (reply: ArrivalsReply) => void): () => void;
}

function startWorker(url: string): Promise<Worker> {
  const child = fork(WORKER, [], {
    env: { ...process.env, ARRIVALS_DATABASE_URL: url },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const worker: Worker = {
    child,
    request: (request) => child.send(request),
    next: (kind) =>
      new Promise((resolve, reject) => {
        const onExit = (code: number | null) =>
          reject(new Error(`the arrivals worker exited (${code}) before answering ${kind}`));
        const onMessage = (reply: ArrivalsReply) => {
          if (reply.kind !== kind) return;
          child.off('message', onMessage);
          child.off('exit', onExit);
          resolve(reply);
        };
        child.on('message', onMessage);
        child.once('exit', onExit);
      }),
    onReply: (listener) => {
      child.on('message', listener);
      return () => child.off('message', listener);
    },
  };
  return worker.next('ready').then(() => worker);
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/**
 * `n` episodes from `inFlight` callers in this process, each sending one trigger and waiting for
 * it to be done before the next: the same path and clock as the Poisson arrivals, in lockstep.
 */
async function closed(
  worker: Worker,
  unit: ArrivalsUnit,
  n: number,
  inFlight: number,
): Promise<{ perSecond: number; p50: number; p99: number }> {
  const waiting = new Map<number, (doneAt: number) => void>();
  let failure: string | undefined;
  const off = worker.onReply((reply) => {
    if (reply.kind === 'failed') failure ??= reply.reason;
    if (reply.kind !== 'done' && reply.kind !== 'failed') return;
    waiting.get(reply.id)?.(reply.kind === 'done' ? reply.doneAt : Number.NaN);
    waiting.delete(reply.id);
  });
  const latencies: number[] = [];
  let next = 0;
  const started = clock();
  try {
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < n) {
          const id = nextId++;
          next++;
          const done = new Promise<number>((resolve) => waiting.set(id, resolve));
          const sentAt = clock();
          worker.request({ kind: 'trigger', unit, ids: [id] });
          latencies.push((await done) - sentAt);
          if (failure) throw new Error(`an episode failed: ${failure}`);
        }
      }),
    );
  } finally {
    off();
  }
  const sorted = latencies.sort((a, b) => a - b);
  return {
    perSecond: n / ((clock() - started) / 1000),
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
  };
}

/**
 * N arrivals at `perSecond` on average, at exponentially distributed gaps (a Poisson process),
 * fired by this process's timers: arrivals due in the same millisecond leave in one message. Each
 * latency runs from the moment its message was sent to the moment the worker saw it `done`.
 */
async function open(
  worker: Worker,
  unit: ArrivalsUnit,
  perSecond: number,
  n: number,
): Promise<{ p50: number; p99: number; offeredPerSecond: number }> {
  const first = nextId;
  nextId += n;
  const dueMs: number[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += -Math.log(1 - Math.random()) * (1000 / perSecond);
    dueMs.push(Math.floor(t));
  }
  const sentAt = new Map<number, number>();
  const latencies: number[] = [];
  let failure: string | undefined;
  const finished = new Promise<void>((resolve) => {
    const off = worker.onReply((reply) => {
      if (reply.kind === 'failed') failure ??= reply.reason;
      if (reply.kind !== 'done' && reply.kind !== 'failed') return;
      if (reply.kind === 'done' && sentAt.has(reply.id))
        latencies.push(reply.doneAt - (sentAt.get(reply.id) as number));
      if (latencies.length + (failure ? 1 : 0) >= n || failure) {
        off();
        resolve();
      }
    });
  });
  const start = performance.now();
  let i = 0;
  while (i < n) {
    const due = dueMs[i] as number;
    const wait = start + due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const ids: number[] = [];
    while (i < n && (dueMs[i] as number) <= due) ids.push(first + i++);
    const now = clock();
    for (const id of ids) sentAt.set(id, now);
    worker.request({ kind: 'trigger', unit, ids });
  }
  const offeredPerSecond = n / ((performance.now() - start) / 1000);
  await finished;
  if (failure) throw new Error(`an arrival failed: ${failure}`);
  const sorted = latencies.sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), offeredPerSecond };
}

/**
 * CPU per unit in the worker and in the database server, and how many of the machine's cores the
 * two kept busy: at a Poisson load, queueing follows how busy the cores are, not the load's share
 * of the 16-in-flight rate (a batched rate, paid for with less CPU per unit than lone units cost).
 */
function cpuColumns(cpu: CpuWindow, n: number): Record<string, string> {
  const busy = cpu.processMs + (cpu.databaseMs ?? 0);
  return {
    'worker CPU ms/unit': (cpu.processMs / n).toFixed(2),
    'PG CPU ms/unit': cpu.databaseMs === undefined ? 'n/a' : (cpu.databaseMs / n).toFixed(2),
    'cores busy': cpu.databaseMs === undefined ? 'n/a' : (busy / cpu.wallMs).toFixed(2),
  };
}

/**
 * Arrivals that do not move in lockstep: manual 1-step episodes on one worker process, triggered
 * at Poisson times by this process at 25 %, 50 % and 90 % of the throughput the worker reached
 * with 16 in flight, each latency (trigger to `done`) set against the latency of an episode alone
 * (1 in flight). Group commit waits for nothing (a lone write leaves at once), so a lightly
 * loaded node should answer about as fast as an idle one. The three-commit floor goes through
 * the same generator, IPC and loads first: what it loses to spread-out arrivals on this machine
 * (cold caches, idle cores waking, commits meeting a WAL flush under way) no library can avoid.
 */
export async function arrivalsBench(url: string): Promise<void> {
  const worker = await startWorker(url);
  try {
    for (const unit of ['floor', 'episode'] as const) {
      await closed(worker, unit, WARM_UP, 4);
      const pid = worker.child.pid as number;
      let stop = await cpuWindow(url, pid);
      const full = await closed(worker, unit, CLOSED_N[16], 16);
      const fullCpu = await stop();
      const row = (
        load: string,
        perSecond: number,
        p50: number,
        p99: number,
        alone: { p50: number; p99: number },
        cpu: CpuWindow,
        n: number,
      ) => ({
        load,
        'units/s': Math.round(perSecond),
        'p50 ms': p50.toFixed(2),
        'p99 ms': p99.toFixed(2),
        '1 in flight p50 / p99 ms': `${alone.p50.toFixed(2)} / ${alone.p99.toFixed(2)}`,
        'p50 ÷ 1 in flight': (p50 / alone.p50).toFixed(2),
        'p99 ÷ 1 in flight': (p99 / alone.p99).toFixed(2),
        ...cpuColumns(cpu, n),
      });
      const rows: Array<Record<string, string | number>> = [];
      // This machine's speed drifts: each load is set against 1 in flight measured just before and just after it.
      let before = await closed(worker, unit, CLOSED_N[1], 1);
      rows.push(
        row('16 in flight', full.perSecond, full.p50, full.p99, before, fullCpu, CLOSED_N[16]),
      );
      for (const load of LOADS) {
        stop = await cpuWindow(url, pid);
        const result = await open(worker, unit, load * full.perSecond, N);
        const cpu = await stop();
        const after = await closed(worker, unit, CLOSED_N[1], 1);
        const alone = { p50: (before.p50 + after.p50) / 2, p99: (before.p99 + after.p99) / 2 };
        rows.push(
          row(
            `Poisson ${load * 100} %`,
            result.offeredPerSecond,
            result.p50,
            result.p99,
            alone,
            cpu,
            N,
          ),
        );
        before = after;
      }
      const what =
        unit === 'floor'
          ? 'the three-commit floor (insert, update, update on a bare pooled connection in the worker)'
          : 'manual 1-step episodes';
      printTable(
        `arrivals: ${what}, trigger to done (IPC included), Poisson loads of the 16-in-flight rate (${Math.round(full.perSecond)}/s); N=${N} per load`,
        rows,
      );
    }
  } finally {
    worker.child.disconnect();
    await new Promise((resolve) =>
      worker.child.exitCode !== null ? resolve(undefined) : worker.child.once('exit', resolve),
    );
  }
}
