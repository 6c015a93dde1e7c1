import type { INestApplicationContext } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Episodes } from '../dispatch/episodes.service.js';
import { TriggerPoller } from '../dispatch/trigger-poller.service.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import { BRING_DEADLINES_FORWARD, UNSETTLED_COUNT } from '../episodes/clock-moves.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { decodeStepResult } from '../episodes/step-result.js';
import { OutputStore } from '../outputs/output-store.js';
import { TriggerSources } from '../triggers/trigger-sources.service.js';
import type { ClockMoves } from './test-clock.js';
import type { Bus } from '../bus/bus.interface.js';
import { busStatusOf } from '../bus/bus-status.interface.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';

/** A bus that can read its channel on demand (PostgresBus). */
type CatchingUp = Bus & Partial<{ catchUp(): Promise<void> }>;

/** One journal row of an episode, as a test reads it. */
export interface JournalEntry {
  stepNo: number;
  /** `step` for a step, transaction or wait; else the library's marker (`retry`, `resumed`…). */
  kind: string;
  name: string;
  /** A step's recorded result; a marker's detail. */
  result: unknown;
  errorClass: string | null;
}

/** Options of `episodes.waitFor`. */
export interface WaitForOptions {
  /** Wait for this status instead of any end. */
  status?: EpisodeStatus;
  /** Default 10 000. */
  timeoutMs?: number;
}

const ENDED: ReadonlySet<EpisodeStatus> = new Set([
  'done',
  'partially_failed',
  'failed',
  'canceled',
]);
const DEFAULT_TIMEOUT_MS = 10_000;
const LOOK_EVERY_MS = 10;

/**
 * What the testing kit does to a running test app: moves its stored due times and fires its
 * schedules when the clock moves, polls for due work and waits for it to settle.
 */
export class TestDriver implements ClockMoves {
  private readonly sql;
  private readonly poller: TriggerPoller;
  private readonly requests: TriggerRequests;
  private readonly runner: EpisodeRunner;
  private readonly sources: TriggerSources;
  private readonly episodes: Episodes;
  private readonly outputStore: OutputStore;
  private readonly bus: CatchingUp;

  constructor(app: INestApplicationContext) {
    this.bus = app.get<CatchingUp>(CYCLIUM_BUS_TRANSPORT);
    this.sql = app.get(CycliumDataSource).sql;
    this.poller = app.get(TriggerPoller);
    this.requests = app.get(TriggerRequests);
    this.runner = app.get(EpisodeRunner);
    this.sources = app.get(TriggerSources);
    this.episodes = app.get(Episodes);
    this.outputStore = app.get(OutputStore);
  }

  async moved(from: number, to: number): Promise<void> {
    const ms = to - from;
    if (ms > 0) {
      await this.requests.bringForward(ms);
      await this.sql.query(BRING_DEADLINES_FORWARD, [ms]);
    }
    await this.sources.fireSchedulesBetween(from, to);
    await this.poller.pollNow();
  }

  async runUntilIdle(timeoutMs = DEFAULT_TIMEOUT_MS): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      // Events published so far are read and handed to their triggers before the look.
      await this.bus.catchUp?.();
      await this.poller.pollNow();
      const busy = await this.busy();
      if (busy === null) return;
      if (performance.now() > deadline)
        throw new Error(`runUntilIdle: still busy after ${timeoutMs} ms: ${busy}`);
      await sleep(LOOK_EVERY_MS);
    }
  }

  async waitFor(id: string, options: WaitForOptions = {}): Promise<EpisodeRow> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const deadline = performance.now() + timeoutMs;
    const reached = (status: EpisodeStatus) =>
      options.status === undefined ? ENDED.has(status) : status === options.status;
    for (;;) {
      const episode = await this.episodes.get(id);
      if (episode === null) throw new Error(`waitFor: no episode ${id}`);
      if (reached(episode.status)) return episode;
      if (performance.now() > deadline)
        throw new Error(
          `waitFor: episode ${id} is ${episode.status} after ${timeoutMs} ms (waiting for ` +
            `${options.status ?? 'its end'})`,
        );
      await this.poller.pollNow();
      await sleep(LOOK_EVERY_MS);
    }
  }

  async journal(id: string): Promise<JournalEntry[]> {
    const steps = await this.episodes.steps(id);
    return steps.map((s) => ({
      stepNo: s.stepNo,
      kind: s.kind,
      name: s.name,
      result: s.kind === 'step' ? decodeStepResult(s.resultRef) : s.resultRef,
      errorClass: s.errorClass,
    }));
  }

  outputs(id: string): Promise<CycliumOutput[]> {
    return this.outputStore.forEpisode(id);
  }

  /** What is still busy, or null when nothing runs here and nothing is due. */
  private async busy(): Promise<string | null> {
    const running = this.runner.inFlight().length;
    if (running > 0) return `${running} episode(s) running`;
    const events = busStatusOf(this.bus)?.unsettledEvents ?? 0;
    if (events > 0) return `${events} bus event(s) not yet dispatched`;
    const due = await this.requests.dueCount();
    if (due > 0) return `${due} trigger request(s) due`;
    const { rows } = await this.sql.query<{ unsettled: number }>(UNSETTLED_COUNT);
    const unsettled = rows[0]?.unsettled ?? 0;
    return unsettled > 0 ? `${unsettled} episode(s) running, queued or throttled` : null;
  }
}
