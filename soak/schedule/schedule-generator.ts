/**
 * The generator: a seed (and the fixed parameters) in, a schedule out, with no other input, so a
 * failing seed replays.
 */
import { FaultLane } from './fault-lane.js';
import type { Schedule, ScheduleParameters } from './schedule.js';
import { SeededRandom } from './seeded-random.js';
import { setupFor } from './seed-setup.js';
import { WorkLane } from './work-lane.js';

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
