import { Injectable } from '@nestjs/common';
import { Actor, Expectation, type EpisodeContext } from '@cyclium/nestjs';

/** How many episodes TwoStepActor runs at once: enough for a node's writes to leave in batches. */
export const TWO_STEPS_AT_ONCE = 8;

/**
 * `two-step.run` (manual): two steps, so an episode writes a step on its own and carries its last
 * into its end. The plan tests capture a node's real statements through it.
 */
@Injectable()
@Actor({ id: 'two-step', maxConcurrentEpisodes: TWO_STEPS_AT_ONCE })
export class TwoStepActor {
  @Expectation({ id: 'run', trigger: 'manual' })
  async run(ep: EpisodeContext<{ n: number }>): Promise<void> {
    await ep.step('first', () => ep.trigger.payload.n);
    await ep.step('second', () => 2);
  }
}
