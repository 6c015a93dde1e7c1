import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { TERMINAL_EVENTS, type LifecyclePayload } from '../episodes/episode-events.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { EpisodeResultTimeoutError } from '../episodes/wait-errors.js';
import type { EpisodeOutcome, ResultOptions } from '../episodes/wait.types.js';
import { isUuid } from '../sql/uuid.js';

const TERMINAL = new Set(['done', 'partially_failed', 'failed', 'canceled']);

/**
 * `Episodes.result`: the episode's terminal event wakes the caller (it reaches every node of the
 * channel; this node reads them only while a result is awaited here), and the row is read again at
 * least every `triggerPollIntervalMs`, so a caller behind a pooler without LISTEN, or one that
 * missed the event, still gets its answer within a poll.
 */
@Injectable()
export class EpisodeResults implements OnModuleDestroy {
  private readonly waiting = new Map<string, Set<() => void>>();
  private readonly offs: Array<() => void> = [];

  constructor(
    private readonly store: EpisodeStore,
    private readonly events: EventOutbox,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onModuleDestroy(): void {
    this.unlisten();
  }

  /**
   * Terminal events are read only while someone awaits a result: a node that never calls
   * `Episodes.result` reads no more of the bus than before (its own ends included).
   */
  private listen(): void {
    if (this.offs.length > 0) return;
    for (const type of TERMINAL_EVENTS)
      this.offs.push(
        this.events.subscribe<LifecyclePayload>(type, (event) => {
          const id = event.payload?.episodeId;
          if (id) for (const wake of this.waiting.get(id) ?? []) wake();
        }),
      );
  }

  private unlisten(): void {
    for (const off of this.offs.splice(0)) off();
  }

  /**
   * The episode's outcome once it ended; null when there is no such episode;
   * EpisodeResultTimeoutError when it is still live after `timeoutMs`.
   */
  async result<R = unknown>(
    id: string,
    options: ResultOptions = {},
  ): Promise<EpisodeOutcome<R> | null> {
    const timeoutMs = options.timeoutMs ?? 30_000;
    if (!(Number.isSafeInteger(timeoutMs) && timeoutMs >= 0))
      throw new RangeError(
        `Episodes.result: timeoutMs must be a whole number of milliseconds >= 0 (got ` +
          `${String(timeoutMs)})`,
      );
    if (!isUuid(id)) return null;
    const until = performance.now() + timeoutMs;
    let wake: () => void = () => undefined;
    const woken = () => wake();
    this.listen();
    const set = this.waiting.get(id) ?? new Set();
    this.waiting.set(id, set);
    set.add(woken);
    try {
      // The end writes its event only for a declared reader: this node is one before it reads the
      // row (an end that looked earlier is found by the poll below).
      await this.events.readsStored();
      for (;;) {
        // Listening before reading: an end between the two still wakes the wait below.
        const poked = new Promise<void>((resolve) => (wake = resolve));
        const row = await this.store.get(id);
        if (!row) return null;
        if (TERMINAL.has(row.status)) return outcomeOf<R>(row);
        const left = until - performance.now();
        if (left <= 0) throw new EpisodeResultTimeoutError(id, timeoutMs);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          poked,
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, Math.min(left, this.options.triggerPollIntervalMs));
          }),
        ]);
        clearTimeout(timer);
      }
    } finally {
      set.delete(woken);
      if (set.size === 0) this.waiting.delete(id);
      if (this.waiting.size === 0) this.unlisten();
    }
  }
}

function outcomeOf<R>(row: EpisodeRow): EpisodeOutcome<R> {
  return {
    episodeId: row.id,
    status: row.status as EpisodeOutcome['status'],
    result: (row.result ?? null) as R | null,
    errorClass: row.errorClass,
    error: row.errorDetail,
  };
}
