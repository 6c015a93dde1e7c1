/**
 * A seed's cluster: whether it runs processes or worker threads, claims on or off, which actors
 * each slot hosts (one service, two services, or a rolling deploy half done), whether a node of
 * another env or stack stands beside it, its timings and its retention windows.
 */
import type { ActorId, NodeTimings, NodeWindows } from '../node/node-protocol.js';
import type { ScheduleParameters, SeedSetup, SlotSetup } from './schedule.js';
import type { SeededRandom } from './seeded-random.js';

/** What the generator assumes a boot takes, to leave a slot alone meanwhile. */
export const BOOT_ESTIMATE_MS = { worker: 3_000, process: 5_000 };
export const MAIN_SLOTS = 3;

function timings(short: boolean): NodeTimings {
  return {
    leaseSeconds: 3,
    staleAfterMs: 3_000,
    settleMs: 500,
    sweepIntervalMs: 800,
    beatMs: 700,
    pollMs: 1_000,
    // Idle polls on (the library's default with the postgres bus): a sleep, backoff or wait whose
    // node dies is taken by another within this of its due time.
    idlePollMs: 4_000,
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

export function setupFor(seed: number, rng: SeededRandom, params: ScheduleParameters): SeedSetup {
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
      // Another env hosts the same actors (its requests and rows are its own); a node of another
      // stack in the same env hosts none, since by default a node polls every stack's trigger
      // requests and would run the main stack's wake-ups, as documented.
      actors: outsider === 'env' ? both : [],
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
    // From the seed, not the generator: the seeds' schedules stay as they were.
    lifecycleReaders: seed % 2 === 1,
    layout,
    outsider,
    slots,
    timings: timings(short),
    windows: short ? SHORT_WINDOWS : null,
    durationMs: params.durationMs,
    databaseRestarts: params.databaseRestarts,
  };
}
