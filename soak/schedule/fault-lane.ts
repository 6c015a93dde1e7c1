/**
 * The fault lane of a schedule. It keeps a model of which slots are up only to choose sensible
 * faults (never the last node outside a whole-cluster stop); what really happens is the runner's log.
 */
import type { CycliumMode } from '@cyclium/nestjs';
import type { FaultOp, SeedSetup, Timed } from './schedule.js';
import type { SeededRandom } from './seeded-random.js';
import { BOOT_ESTIMATE_MS, MAIN_SLOTS } from './seed-setup.js';

export class FaultLane {
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
        this.upAt[slot] =
          at + backAfterMs + boot + (kind === 'term' ? setup.timings.shutdownMs : 0);
      } else if (kind === 'db_restart') {
        const downMs = rng.int(1_000, 6_000);
        // Now and then a node is killed just before, so its replacement boots while the database is down.
        const slot = rng.chance(0.3) ? this.takeable(at) : undefined;
        if (slot !== undefined) {
          this.ops.push({
            at,
            op: {
              kind: 'kill',
              slot,
              backAfterMs: 600,
              identity: rng.chance(0.5) ? 'same' : 'new',
            },
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
    if (shape === 'all_disabled')
      return { kind: 'mode', slot: 'all', mode, forMs: Math.min(forMs, 4_000) };
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
    const first = rng.chance(0.7)
      ? [rng.int(0, MAIN_SLOTS - 1)]
      : [0, 1, 2].filter(() => rng.chance(0.6));
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
