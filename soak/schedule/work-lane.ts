/**
 * The work lane of a schedule: triggers of every kind (manual, delayed, keyed, on the second
 * actor, on the node of another env or stack), events (some in bursts on a debounced subject) and
 * cancels, each with a payload that says what its episode does.
 */
import type { ActorId, WorkPayload } from '../node/node-protocol.js';
import { SUBJECT_COOLDOWN_MS, SUBJECT_DEBOUNCE_MS } from '../node/actor-policies.js';
import { opId, type SeedSetup, type WorkEntry, type WorkOp } from './schedule.js';
import type { SeededRandom } from './seeded-random.js';
import { MAIN_SLOTS } from './seed-setup.js';

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

export class WorkLane {
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
    const hosts = (actor: ActorId) =>
      main.filter((s) => s.actors.includes(actor)).map((s) => s.slot);
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
        outsider: setup.outsider === 'env' ? 6 : 0,
      });
      const work = payload(rng, op, stale);
      const retryAttempts =
        work.throws !== undefined ? rng.int(2, 3) : rng.chance(0.25) ? 2 : undefined;
      const backoff = rng.chance(0.3) ? { retryBackoffMs: 0 } : {};
      const withRetry = retryAttempts === undefined ? {} : { retryAttempts, ...backoff };
      const alphaSlot = rng.pick(hosts('fs_alpha'));
      if (kind === 'manual') {
        const expectation = rng.chance(0.6) ? 'job_restart' : 'job_fail';
        this.add(at, {
          kind: 'trigger',
          slot: alphaSlot,
          actor: 'fs_alpha',
          expectation,
          payload: work,
          ...withRetry,
        });
      } else if (kind === 'beta') {
        const slot = rng.pick(hosts('fs_beta'));
        this.add(at, {
          kind: 'trigger',
          slot,
          actor: 'fs_beta',
          expectation: 'job_beta',
          payload: work,
          ...withRetry,
        });
      } else if (kind === 'delayed') {
        const when = rng.chance(0.5)
          ? { delayMs: rng.int(300, 6_000) }
          : { runAtInMs: rng.int(300, 6_000) };
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
        this.add(at, {
          kind: 'publish',
          slot: rng.pick(main).slot,
          type: 'fs.work',
          eventId: op,
          payload: work,
        });
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
        const work: WorkPayload = {
          op: eventId,
          steps: rng.int(1, 2),
          stepMs: rng.int(40, 200),
          subject,
        };
        this.add(t, {
          kind: 'publish',
          slot: rng.pick(main).slot,
          type: 'fs.subject',
          eventId,
          payload: work,
        });
        t += rng.int(40, 250);
      }
    };
    burst();
    if (rng.chance(0.5)) {
      const inside = rng.chance(0.5);
      const fired = t + SUBJECT_DEBOUNCE_MS;
      t = inside
        ? fired + rng.int(500, SUBJECT_COOLDOWN_MS - 600)
        : fired + SUBJECT_COOLDOWN_MS + rng.int(800, 1_500);
      burst();
    }
  }
}
