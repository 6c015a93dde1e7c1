import type { EpisodeRunner } from '../episodes/episode-runner.service.js';
import type { NewEpisode } from '../episodes/episode-inserts.js';
import type { RegisteredActor } from '../actors/registered-actor.js';
import type { SlotResult } from './dispatch-result.js';
import type { SlotRuns } from './slot-runs.interface.js';

/**
 * Triggers of one actor that may wait here in memory, beyond which a trigger is queued in the
 * table as before: enough to absorb a burst without a queued row per event, few enough that a
 * node which dies replays a bounded stretch of the bus.
 */
export const WAITING_PER_ACTOR = 2_000;

interface Waiting {
  spec: Omit<NewEpisode, 'status'>;
  resolve: (result: SlotResult) => void;
  reject: (error: unknown) => void;
}

/**
 * Bus-event triggers that found every slot of their actor busy and wait for one in memory rather
 * than as queued rows. This keeps rule 11 because their event does not settle until they start:
 * the consumer's durable position stays behind it, so if this node dies (or drains), the bus's next
 * reader, a peer or this node after its restart, reads the event again and the dedupe key decides.
 * A freed slot starts the oldest at once through the batched begin, which saves the queued insert
 * and the dequeue a queued row costs, and lets begins that free together leave as one statement.
 */
export class WaitingTriggers {
  private readonly waiting = new Map<string, Waiting[]>();

  constructor(
    private readonly runner: EpisodeRunner,
    private readonly slots: SlotRuns,
  ) {}

  /**
   * Waits for a slot of `actor` and starts there; null when its waiting room is full (queue it in
   * the table instead). `withdraw` ends the wait with `duplicate`: another node started it.
   */
  wait(
    actor: RegisteredActor,
    spec: Omit<NewEpisode, 'status'>,
  ): { result: Promise<SlotResult>; withdraw: () => void } | null {
    let list = this.waiting.get(actor.id);
    if (!list) this.waiting.set(actor.id, (list = []));
    if (list.length >= WAITING_PER_ACTOR) return null;
    const waiting = list;
    let entry: Waiting | undefined;
    const result = new Promise<SlotResult>((resolve, reject) =>
      waiting.push((entry = { spec, resolve, reject })),
    );
    const withdraw = () => {
      const at = entry ? waiting.indexOf(entry) : -1;
      if (at < 0) return;
      waiting.splice(at, 1);
      entry?.resolve({ status: 'duplicate' });
    };
    return { result, withdraw };
  }

  /** Triggers of `actorId` waiting now. */
  count(actorId: string): number {
    return this.waiting.get(actorId)?.length ?? 0;
  }

  /**
   * Starts the oldest waiting trigger of `actor` in a slot it reserves (the caller checked one is
   * free); false when none waits.
   */
  startNext(actor: RegisteredActor): boolean {
    const next = this.waiting.get(actor.id)?.shift();
    if (!next) return false;
    this.slots.reserve(actor.id);
    this.slots.starting(this.runner.begin({ ...next.spec, status: 'running' })).then(
      (begun) => {
        if (begun.status !== 'started') {
          this.slots.release(actor);
          return next.resolve(begun);
        }
        this.slots.launch(actor, begun.episode, begun.grant);
        next.resolve({ status: 'started', episode: begun.episode });
      },
      (error: unknown) => {
        this.slots.release(actor);
        next.reject(error);
      },
    );
    return true;
  }

  /**
   * The drain: every waiting trigger answers busy, and its event stays unsettled for the bus's next
   * reader.
   */
  releaseAll(): void {
    const all = [...this.waiting.values()].flatMap((list) => list.splice(0));
    for (const waiting of all) waiting.resolve({ status: 'busy' });
  }
}
