import type { Logger } from '@nestjs/common';
import { errorMessage } from '../sql/database-errors.js';
import type { Dispatcher } from '../dispatch/dispatcher.service.js';
import type { EpisodeTrigger } from '../episodes/episode-context.interface.js';
import type { EpisodeStore } from '../episodes/episode-store.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';

interface Handover {
  expectation: RegisteredExpectation;
  trigger: EpisodeTrigger;
  dedupeKey: string;
  what: string;
  insertBefore?: Date;
  settled: (settled: boolean) => void;
}

/**
 * The bus triggers a draining node stood by for (another node ranked first): collected, so the
 * drain hands them over together. Once this node stops, nobody else may remember that these
 * triggers still lack their episodes. Most have one by now (the first node's signal was on its
 * way), so one statement finds those and only the rest are deferred to a full node.
 */
export class DrainHandovers {
  private readonly pending: Handover[] = [];

  constructor(
    private readonly store: EpisodeStore,
    private readonly dispatcher: Dispatcher,
    private readonly logger: Logger,
    private readonly scope: { sourceStack: string | null; sourceEnv: string | null },
  ) {}

  /**
   * Resolves true once the trigger is settled (here or elsewhere), false when the bus's next reader
   * must fire it. `insertBefore` bounds the handed-over episode's insert (NewEpisode.insertBefore).
   */
  add(handover: Omit<Handover, 'settled'>): Promise<boolean> {
    return new Promise((settled) => this.pending.push({ ...handover, settled }));
  }

  async handOverAll(): Promise<void> {
    const pending = this.pending.splice(0);
    if (pending.length === 0) return;
    let held: Set<string>;
    try {
      held = await this.store.heldDedupeKeys(pending.map((p) => p.dedupeKey));
    } catch (error) {
      this.logger.warn(
        `could not check ${pending.length} trigger(s) this node stood by for; handing each over: ` +
          `${errorMessage(error)}`,
      );
      held = new Set();
    }
    for (const p of pending) if (held.has(p.dedupeKey)) p.settled(true);
    await Promise.all(
      pending
        .filter((p) => !held.has(p.dedupeKey))
        .map(({ expectation, trigger, dedupeKey, what, insertBefore, settled }) =>
          this.dispatcher
            .handOver(expectation, trigger, { ...this.scope, dedupeKey, insertBefore })
            .then(
              (result) => {
                this.logger.log(`${what}: handed to the cluster while draining (${result.status})`);
                settled(true);
              },
              (error: unknown) => {
                this.logger.warn(
                  `${what} could not be handed over while draining; the bus's next reader fires ` +
                    `it: ${errorMessage(error)}`,
                );
                settled(false);
              },
            ),
        ),
    );
  }
}
