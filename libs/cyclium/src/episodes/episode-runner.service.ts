import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import { ClaimLostError } from '../claims/claim-lost.error.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../claims/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../database/sql-executor.js';
import { Findings } from '../findings/findings.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Outputs } from '../outputs/outputs.service.js';
import type { CycliumOutput } from '../outputs/output.entity.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { EpisodeStatus } from './episode.entity.js';
import type { Convergence, EpisodeRow, EpisodeTrigger } from './episode-context.interface.js';
import {
  BudgetExceededError,
  EpisodeCanceledError,
  EpisodeInterruptedError,
  NondeterministicResumeError,
} from './episode-errors.js';
import { CANCEL_EVENT, lifecycleEvent, type LifecycleEventType } from './episode-events.js';
import { EpisodeStore, STEP_WRITE, claimKeyOf, type NewEpisode } from './episode-store.js';
import { RunningEpisode, type StepRecord } from './running-episode.js';

export type BeginResult =
  | { status: 'started'; episode: EpisodeRow; grant: AcquireResult }
  | { status: 'duplicate' }
  | { status: 'busy' };

/** Rolls back a begin whose claim was busy: the node then writes nothing at all. */
class ClaimBusy extends Error {}

interface Ownership {
  key: string;
  owner: string;
  fence: number | null;
}

/**
 * Runs one episode from its claim to its terminal status: steps fenced one statement each, then
 * the post-converge transaction. Every terminal path publishes exactly one terminal bus event; a
 * run that lost its claim writes nothing and publishes nothing (the episode is someone else's now).
 */
@Injectable()
export class EpisodeRunner implements OnModuleInit {
  private readonly logger = new Logger(EpisodeRunner.name);
  private readonly running = new Map<string, RunningEpisode>();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeStore,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly registry: ActorRegistry,
    private readonly findings: Findings,
    private readonly outputs: Outputs,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
  ) {}

  onModuleInit(): void {
    this.events.subscribe<{ episodeId: string }>(CANCEL_EVENT, (event) => {
      this.running.get(event.payload.episodeId)?.stop(new EpisodeCanceledError(event.payload.episodeId));
    });
  }

  /** Episodes running on this node now. */
  inFlight(): RunningEpisode[] {
    return [...this.running.values()];
  }

  /** Inserts a running episode and takes its claim in one transaction; busy or duplicate writes nothing. */
  begin(spec: NewEpisode): Promise<BeginResult> {
    return this.claimWith((client) => this.store.insert(spec, client));
  }

  /** Moves a queued episode of this node to running and takes its claim, in one transaction. */
  beginQueued(id: string): Promise<BeginResult> {
    return this.claimWith((client) => this.store.dequeue(id, this.identity.name(), client));
  }

  /** Takes an episode recovery handed to this node (phase `recovering`) and its claim, in one transaction. */
  beginResumed(id: string): Promise<BeginResult> {
    return this.claimWith((client) => this.store.takeForResume(id, this.identity.name(), client));
  }

  /**
   * `load` writes the running row; the claim and the `episode.started` event commit with it or
   * nothing does. Nobody waits on `started`, so it rides along with the next wake-up.
   */
  private async claimWith(load: (client: SqlExecutor) => Promise<EpisodeRow | null>): Promise<BeginResult> {
    try {
      return await this.database.transaction(async (client) => {
        const episode = await load(client);
        if (!episode) return { status: 'duplicate' as const };
        const grant = await this.claims.acquireWithin(client, claimKeyOf(episode), this.identity.name());
        if (grant.status === 'busy') throw new ClaimBusy();
        await this.events.within(client, [this.lifecycle('episode.started', episode, 'running')], { wake: false });
        return { status: 'started' as const, episode, grant };
      });
    } catch (error) {
      if (error instanceof ClaimBusy) return { status: 'busy' };
      throw error;
    }
  }

  /** Cancels a queued episode and announces it, in one transaction; null when it was not queued any more. */
  async cancelQueued(id: string): Promise<EpisodeRow | null> {
    const canceled = await this.database.transaction(async (client) => {
      const episode = await this.store.cancelQueued(id, client);
      if (!episode) return null;
      return { episode, announce: await this.events.within(client, [this.lifecycle('episode.canceled', episode, 'canceled')]) };
    });
    canceled?.announce();
    return canceled?.episode ?? null;
  }

  /** Runs the episode to its end. Never rejects: every outcome is recorded (or, when the claim is lost, left alone). */
  async run(episode: EpisodeRow, grant: AcquireResult, options: { resumed?: boolean } = {}): Promise<void> {
    const resumed = options.resumed ?? false;
    const ownership: Ownership = {
      key: claimKeyOf(episode),
      owner: this.identity.name(),
      fence: grant.status === 'acquired' ? grant.claim.fence : null,
    };
    const hold = this.claims.hold(ownership.key, grant);
    let context: RunningEpisode | undefined;
    try {
      const expectation = this.registry.expectation(episode.actorId, episode.expectationId);
      if (!expectation) {
        throw Object.assign(new Error(`no actor ${episode.actorId} with expectation ${episode.expectationId} on this node`), {
          errorClass: 'unknown_actor',
        });
      }
      context = new RunningEpisode({
        episode,
        trigger: episode.triggerRef as unknown as EpisodeTrigger,
        fence: ownership.fence,
        resumed,
        hold,
        checkpoints: resumed ? await this.store.checkpoints(episode.id) : new Map(),
        firstJournalNo: resumed ? await this.store.nextJournalNo(episode.id) : 1,
        budget: expectation.options.budget,
        writeStep: (record) => this.writeStep(episode, ownership, record),
      });
      this.running.set(episode.id, context);
      this.telemetry.emit(resumed ? 'episode.resumed' : 'episode.started', this.describe(episode));

      const result = (await expectation.handler(context)) as Convergence | undefined;
      context.throwIfAborted();
      await this.converge(episode, ownership, result ?? {});
    } catch (error) {
      const cause = context?.signal.aborted ? (context.signal.reason as unknown) : error;
      await this.settle(episode, ownership, cause).catch((e: unknown) =>
        this.logger.error(`could not record the end of episode ${episode.id}: ${String(e)}`),
      );
    } finally {
      this.running.delete(episode.id);
      hold.release();
    }
  }

  private async writeStep(episode: EpisodeRow, ownership: Ownership, record: StepRecord): Promise<boolean> {
    const result = JSON.stringify({ v: record.result ?? null });
    const { rows } = await this.claims.fencedStatement<{ written: number }>(this.database.sql, ownership, STEP_WRITE, [
      episode.id,
      record.journalNo,
      record.name,
      result,
      record.durationMs,
      record.stepNo,
    ]);
    return rows[0]?.written === 1;
  }

  /**
   * Post-converge (rule 4): ownership at the fence, findings, outputs, status, checkpoints, claim
   * and the terminal event — one transaction.
   */
  private async converge(episode: EpisodeRow, ownership: Ownership, result: Convergence): Promise<void> {
    const status: EpisodeStatus = result.status === 'partially_failed' ? 'partially_failed' : 'done';
    const won = await this.database.transaction<{ outputs: CycliumOutput[]; announce: Announce } | null>(async (client) => {
      if (!(await this.claims.proveOwnership(client, ownership.key, ownership.owner, ownership.fence))) return null;
      await this.findings.persist(client, episode, result.findings ?? []);
      const outputs = await this.outputs.insert(client, episode, result.outputs ?? []);
      const updated = await client.query(
        `UPDATE cyclium_episodes
            SET status = $2, summary = $3, classification = $4::jsonb, phase = NULL, finished_at = now(), updated_at = now()
          WHERE id = $1 AND status = 'running'`,
        [episode.id, status, result.summary ?? null, result.classification === undefined ? null : JSON.stringify(result.classification)],
      );
      if (updated.rowCount !== 1) throw new ClaimLostError(ownership.key, ownership.fence, 'not_owner');
      await client.query(`DELETE FROM cyclium_episode_checkpoints WHERE episode_id = $1`, [episode.id]);
      await this.claims.completeWithin(client, ownership.key, ownership.owner, ownership.fence);
      const announce = await this.events.within(client, [this.lifecycle('episode.completed', episode, status)]);
      return { outputs, announce };
    });
    if (won === null) throw new ClaimLostError(ownership.key, ownership.fence, 'not_owner');
    won.announce();
    this.telemetry.emit('episode.completed', { ...this.describe(episode), status });
    await this.outputs.deliver(won.outputs);
  }

  /** Records how a run that did not converge ended, fenced like every other write, with its terminal event. */
  private async settle(episode: EpisodeRow, ownership: Ownership, cause: unknown): Promise<void> {
    if (cause instanceof ClaimLostError) {
      this.logger.warn(`episode ${episode.id} aborted, writing nothing more: ${cause.message}`);
      this.telemetry.emit('episode.aborted', { ...this.describe(episode), reason: cause.message });
      return;
    }
    if (cause instanceof EpisodeInterruptedError) return; // the drainer already stamped it
    const [status, errorClass, detail] = classify(cause);
    const event = status === 'canceled' ? 'episode.canceled' : 'episode.failed';
    const announce = await this.database.transaction<Announce | null>(async (client) => {
      if (!(await this.claims.proveOwnership(client, ownership.key, ownership.owner, ownership.fence))) return null;
      const updated = await client.query(
        `UPDATE cyclium_episodes
            SET status = $2, error_class = $3, error_detail = $4, phase = NULL, finished_at = now(), updated_at = now()
          WHERE id = $1 AND status = 'running'`,
        [episode.id, status, errorClass, detail],
      );
      if (updated.rowCount !== 1) return null;
      if (status === 'canceled') await this.claims.completeWithin(client, ownership.key, ownership.owner, ownership.fence);
      else await this.claims.failWithin(client, ownership.key, ownership.owner, ownership.fence, `${errorClass}: ${detail}`);
      return this.events.within(client, [this.lifecycle(event, episode, status, { errorClass })]);
    });
    if (!announce) {
      this.logger.warn(`episode ${episode.id} aborted: claim lost before its outcome was recorded`);
      this.telemetry.emit('episode.aborted', { ...this.describe(episode), reason: 'claim lost before the outcome was recorded' });
      return;
    }
    announce();
    this.telemetry.emit(event, { ...this.describe(episode), errorClass });
  }

  private describe(episode: EpisodeRow) {
    return { episodeId: episode.id, actorId: episode.actorId, expectationId: episode.expectationId };
  }

  private lifecycle(type: LifecycleEventType, episode: EpisodeRow, status: EpisodeStatus, extra = {}) {
    return lifecycleEvent(type, episode, status, this.identity.name(), extra);
  }
}

function classify(cause: unknown): [Extract<EpisodeStatus, 'failed' | 'canceled'>, string, string] {
  if (cause instanceof EpisodeCanceledError) return ['canceled', 'canceled', cause.message];
  if (cause instanceof BudgetExceededError) return ['failed', 'budget_exceeded', cause.message];
  if (cause instanceof NondeterministicResumeError) return ['failed', 'nondeterministic_resume', cause.message];
  if (cause instanceof Error) {
    const errorClass = (cause as Error & { errorClass?: string }).errorClass ?? 'crash';
    return ['failed', errorClass, `${cause.message}\n${cause.stack ?? ''}`.trim()];
  }
  return ['failed', 'crash', String(cause)];
}
