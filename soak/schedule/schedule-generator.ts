/**
 * The generator: a seed (and the fixed parameters) in, a schedule out, with no other input, so a
 * failing seed replays. It keeps a model of which slots are up only to choose sensible faults
 * (never the last node outside a whole-cluster stop); what really happens is the runner's log.
 */
import type { CycliumMode } from '@cyclium/nestjs';
import type { ActorId, NodeTimings, NodeWindows, WorkPayload } from '../node/node-protocol.js';
import type {
  FaultOp,
  Schedule,
  ScheduleParameters,
  SeedSetup,
  SlotSetup,
  Timed,
  WorkEntry,
  WorkOp,
} from './schedule.js';
import { opId } from './schedule.js';
import { SeededRandom } from './seeded-random.js';
import { SUBJECT_COOLDOWN_MS, SUBJECT_DEBOUNCE_MS } from '../node/fault-actors.js';

/** What the generator assumes a boot takes, to leave a slot alone meanwhile. */
const BOOT_ESTIMATE_MS = { worker: 3_000, process: 5_000 };
const MAIN_SLOTS = 3;

function timings(short: boolean): NodeTimings {
  return {
    leaseSeconds: 3,
    staleAfterMs: 3_000,
    settleMs: 500,
    sweepIntervalMs: 800,
    beatMs: 700,
    pollMs: 1_000,
    busPollMs: 2_000,
    shutdownMs: 1_500,
    notHostedGraceMs: 7_000,
    triggerRequestTtlMs: short ? 12_000 : 15_000,
    outputRetryBaseMs: 300,
  };
}

const SHORT_WINDOWS: NodeWindows = {
  busRetentionMs: 6_000,
  busUndispatchedMaxAgeMs: 15_000,
  archiveAfter: 15_000,
  deleteAfter: 5_000,
  intervalMs: 2_000,
};

function setupFor(seed: number, rng: SeededRandom, params: ScheduleParameters): SeedSetup {
  const processes = params.processes ?? rng.chance(params.processesShare);
  const claims = params.claims ?? rng.chance(0.5);
  const layout = rng.weighted({ one_service: 5, two_services: 3, rolling: 2 });
  const outsider = rng.weighted({ none: 2, env: 1, stack: 1 });
  const short = rng.chance(0.4);
  const both: ActorId[] = ['fs_alpha', 'fs_beta'];
  const slots: SlotSetup[] = [0, 1, 2].map((slot) => ({
    slot,
    actors: layout !== 'two_services' ? both : slot < 2 ? ['fs_alpha'] : ['fs_beta'],
    env: 'prod',
    stack: 'blue',
    outsider: false,
    legacyAlpha: layout === 'rolling' && slot === 0,
  }));
  if (outsider !== 'none') {
    slots.push({
      slot: MAIN_SLOTS,
      actors: both,
      env: outsider === 'env' ? 'rc' : 'prod',
      stack: outsider === 'stack' ? 'green' : 'blue',
      outsider: true,
      legacyAlpha: false,
    });
  }
  return {
    seed,
    processes,
    claims,
    layout,
    outsider,
    slots,
    timings: timings(short),
    windows: short ? SHORT_WINDOWS : null,
    durationMs: params.durationMs,
    databaseRestarts: params.databaseRestarts,
  };
}

function payload(rng: SeededRandom, op: string, staleAfterMs: number): WorkPayload {
  const steps = rng.int(1, 4);
  const work: WorkPayload = { op, steps, stepMs: rng.int(40, 350) };
  if (rng.chance(0.2)) {
    work.throwAt = rng.int(1, steps);
    work.throws = rng.int(1, 3);
  }
  if (rng.chance(0.15)) {
    work.sleepBefore = rng.int(1, steps);
    work.sleepMs = rng.int(300, 2 * staleAfterMs);
  }
  if (rng.chance(0.3)) work.outputs = rng.int(1, 2);
  return work;
}

class WorkLane {
  readonly ops: WorkEntry[] = [];
  private readonly triggers: number[] = [];

  constructor(
    private readonly rng: SeededRandom,
    private readonly setup: SeedSetup,
  ) {}

  add(at: number, op: WorkOp): number {
    const n = this.ops.length;
    this.ops.push({ at, n, op });
    if (op.kind === 'trigger' && !this.setup.slots[op.slot]?.outsider) this.triggers.push(n);
    return n;
  }

  generate(): void {
    const { rng, setup } = this;
    const main = setup.slots.filter((s) => !s.outsider);
    const hosts = (actor: ActorId) => main.filter((s) => s.actors.includes(actor)).map((s) => s.slot);
    const stale = setup.timings.staleAfterMs;
    for (let at = 800; at < setup.durationMs; at += rng.int(120, 500)) {
      const n = this.ops.length;
      const op = opId(setup.seed, n);
      const kind = rng.weighted({
        manual: 28,
        event: 22,
        subject: 6,
        delayed: 10,
        keyed: 10,
        cancel: this.triggers.length > 0 ? 10 : 0,
        beta: 6,
        outsider: setup.outsider === 'none' ? 0 : 6,
      });
      const work = payload(rng, op, stale);
      const retryAttempts = work.throws !== undefined ? rng.int(2, 3) : rng.chance(0.25) ? 2 : undefined;
      const backoff = rng.chance(0.3) ? { retryBackoffMs: 0 } : {};
      const withRetry = retryAttempts === undefined ? {} : { retryAttempts, ...backoff };
      const alphaSlot = rng.pick(hosts('fs_alpha'));
      if (kind === 'manual') {
        const expectation = rng.chance(0.6) ? 'job_restart' : 'job_fail';
        this.add(at, { kind: 'trigger', slot: alphaSlot, actor: 'fs_alpha', expectation, payload: work, ...withRetry });
      } else if (kind === 'beta') {
        const slot = rng.pick(hosts('fs_beta'));
        this.add(at, { kind: 'trigger', slot, actor: 'fs_beta', expectation: 'job_beta', payload: work, ...withRetry });
      } else if (kind === 'delayed') {
        const when = rng.chance(0.5) ? { delayMs: rng.int(300, 6_000) } : { runAtInMs: rng.int(300, 6_000) };
        this.add(at, {
          kind: 'trigger',
          slot: alphaSlot,
          actor: 'fs_alpha',
          expectation: 'job_restart',
          payload: work,
          ...when,
        });
      } else if (kind === 'keyed') {
        const dedupeKey = `key-${setup.seed}-${rng.int(0, 3)}`;
        const op: WorkOp = {
          kind: 'trigger',
          slot: alphaSlot,
          actor: 'fs_alpha',
          expectation: 'job_restart',
          payload: work,
          dedupeKey,
        };
        this.add(at, op);
      } else if (kind === 'cancel') {
        const target = rng.pick(this.triggers.slice(-12));
        this.add(at, { kind: 'cancel', slot: rng.pick(main).slot, target });
      } else if (kind === 'outsider') {
        const outputs = { ...work, outputs: rng.int(1, 2) };
        this.add(at, {
          kind: 'trigger',
          slot: MAIN_SLOTS,
          actor: 'fs_alpha',
          expectation: 'job_restart',
          payload: outputs,
        });
      } else if (kind === 'event') {
        this.add(at, { kind: 'publish', slot: rng.pick(main).slot, type: 'fs.work', eventId: op, payload: work });
      } else {
        this.subjectBursts(at, `sub-${setup.seed}-${n}`);
      }
    }
    this.ops.sort((a, b) => a.at - b.at || a.n - b.n);
  }

  /** One burst of events for a subject, and sometimes a second: inside the cooldown, or after it. */
  private subjectBursts(at: number, subject: string): void {
    const { rng, setup } = this;
    const main = setup.slots.filter((s) => !s.outsider);
    let t = at;
    const burst = () => {
      for (let i = rng.int(2, 4); i > 0; i--) {
        const eventId = opId(setup.seed, this.ops.length);
        const work: WorkPayload = { op: eventId, steps: rng.int(1, 2), stepMs: rng.int(40, 200), subject };
        this.add(t, { kind: 'publish', slot: rng.pick(main).slot, type: 'fs.subject', eventId, payload: work });
        t += rng.int(40, 250);
      }
    };
    burst();
    if (rng.chance(0.5)) {
      const inside = rng.chance(0.5);
      const fired = t + SUBJECT_DEBOUNCE_MS;
      t = inside ? fired + rng.int(500, SUBJECT_COOLDOWN_MS - 600) : fired + SUBJECT_COOLDOWN_MS + rng.int(800, 1_500);
      burst();
    }
  }
}

class FaultLane {
  readonly ops: Array<Timed<FaultOp>> = [];
  /** Per main slot, when the generator expects it to be up again. */
  private readonly upAt = [0, 0, 0];
  private clusterStops = 0;

  constructor(
    private readonly rng: SeededRandom,
    private readonly setup: SeedSetup,
  ) {}

  generate(): void {
    const { rng, setup } = this;
    const boot = setup.processes ? BOOT_ESTIMATE_MS.process : BOOT_ESTIMATE_MS.worker;
    const wantsClusterStop = rng.chance(0.4);
    const stopAt = rng.int(Math.round(setup.durationMs * 0.3), Math.round(setup.durationMs * 0.6));
    for (let at = 1_500; at < setup.durationMs - 1_000; at += rng.int(1_200, 3_500)) {
      if (wantsClusterStop && this.clusterStops === 0 && at >= stopAt) {
        at = this.clusterStop(at, boot);
        continue;
      }
      const kind = rng.weighted({
        kill: 24,
        term: 14,
        db_restart: setup.databaseRestarts ? 10 : 0,
        retention: setup.windows ? 10 : 3,
        mode: 14,
        db_error: 6,
      });
      if (kind === 'kill' || kind === 'term') {
        const slot = this.takeable(at);
        if (slot === undefined) continue;
        const backAfterMs = kind === 'kill' && rng.chance(0.4) ? 0 : rng.int(500, 3_000);
        const identity = rng.chance(kind === 'kill' ? 0.6 : 0.5) ? 'same' : 'new';
        this.ops.push({ at, op: { kind, slot, backAfterMs, identity } });
        this.upAt[slot] = at + backAfterMs + boot + (kind === 'term' ? setup.timings.shutdownMs : 0);
      } else if (kind === 'db_restart') {
        const downMs = rng.int(1_000, 6_000);
        // Now and then a node is killed just before, so its replacement boots while the database is down.
        const slot = rng.chance(0.3) ? this.takeable(at) : undefined;
        if (slot !== undefined) {
          this.ops.push({
            at,
            op: { kind: 'kill', slot, backAfterMs: 600, identity: rng.chance(0.5) ? 'same' : 'new' },
          });
          this.upAt[slot] = at + downMs + boot + 600;
        }
        this.ops.push({ at: at + 100, op: { kind: 'db_restart', downMs } });
        at += downMs;
      } else if (kind === 'db_error') {
        const code = rng.pick(['40001', '55P03', '57014', '40P01', '25006', '53100']);
        this.ops.push({ at, op: { kind: 'db_error', code, forMs: rng.int(1_000, 4_000) } });
      } else if (kind === 'retention') {
        this.ops.push({ at, op: { kind: 'retention', slot: rng.int(0, MAIN_SLOTS - 1) } });
      } else {
        this.ops.push({ at, op: this.modeChange() });
      }
    }
  }

  private modeChange(): FaultOp {
    const { rng } = this;
    const forMs = rng.int(1_500, 5_000);
    const shape = rng.weighted({
      node_trigger_only: 3,
      node_disabled: 2,
      actor_disabled: 2,
      actor_trigger_only: 1,
      all_disabled: 2,
    });
    const slot = rng.int(0, MAIN_SLOTS - 1);
    const actor = rng.pick(this.setup.slots[slot]?.actors ?? ['fs_alpha']);
    const mode: CycliumMode = shape.endsWith('trigger_only') ? 'trigger_only' : 'disabled';
    if (shape === 'all_disabled') return { kind: 'mode', slot: 'all', mode, forMs: Math.min(forMs, 4_000) };
    if (shape.startsWith('actor')) return { kind: 'mode', slot, mode, actor, forMs };
    return { kind: 'mode', slot, mode, forMs };
  }

  /** A main slot that is up now, leaving at least one other up; undefined when there is none. */
  private takeable(at: number): number | undefined {
    const up = [0, 1, 2].filter((slot) => (this.upAt[slot] as number) <= at);
    if (up.length < 2) return undefined;
    return this.rng.pick(up);
  }

  private clusterStop(at: number, boot: number): number {
    const { rng, setup } = this;
    this.clusterStops++;
    const long = rng.chance(0.35);
    const downMs = long ? rng.int(16_000, 22_000) : rng.int(2_000, 12_000);
    const first = rng.chance(0.7) ? [rng.int(0, MAIN_SLOTS - 1)] : [0, 1, 2].filter(() => rng.chance(0.6));
    const how = rng.weighted({ kill: 3, term: 1, mixed: 1 });
    const restLaterMs = rng.int(500, 4_000);
    this.ops.push({
      at,
      op: { kind: 'cluster_stop', how, downMs, first: first.length > 0 ? first : [0], restLaterMs },
    });
    const end = at + setup.timings.shutdownMs + downMs + restLaterMs + boot;
    this.upAt.fill(end);
    return end;
  }
}

/** The schedule of `seed`: a pure function of it and `params`. */
export function generateSchedule(seed: number, params: ScheduleParameters): Schedule {
  const rng = new SeededRandom(seed);
  const setup = setupFor(seed, rng, params);
  // Each lane draws from its own stream, so a change to one lane's choices leaves the other as it was.
  const work = new WorkLane(new SeededRandom(seed * 7919 + 1), setup);
  work.generate();
  const faults = new FaultLane(new SeededRandom(seed * 104_729 + 2), setup);
  faults.generate();
  faults.ops.sort((a, b) => a.at - b.at);
  return { setup, work: work.ops, faults: faults.ops };
}
