import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorHost } from '../actors/actor-host.service.js';
import { WorkClaims } from '../claims/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { EpisodeInterruptedError } from '../episodes/episode-errors.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { claimKeyOf } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';

export interface DrainResult {
  stamped: number;
  killed: number;
}

const STAMP = `
  UPDATE cyclium_episodes SET phase = 'interrupted', updated_at = now()
   WHERE id = ANY($1::uuid[]) AND status = 'running'
  RETURNING id`;

const MARK_INTERRUPTED = `
  INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
  SELECT s.id,
         coalesce((SELECT max(j.step_no) FROM cyclium_episode_steps j WHERE j.episode_id = s.id), 0) + 1,
         'observation', 'interrupted', jsonb_build_object('event', 'interrupted', 'node', $2::text)
    FROM unnest($1::uuid[]) AS s (id)`;

/**
 * Rule 7, on shutdown: write first, then stop. Stamps every episode this node runs (or holds for a
 * restart) `interrupted`, releases their claims and journals one marker each — three statements,
 * whatever the number — then aborts the tasks and waits up to `episodeShutdownMs`. Releasing the
 * claims first means a task still mid-step can no longer write: its fenced write finds the lease
 * gone. Peers restart stamped episodes at their next sweep, without waiting for staleness.
 */
@Injectable()
export class Drainer {
  private readonly logger = new Logger(Drainer.name);
  private draining: Promise<DrainResult> | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly runner: EpisodeRunner,
    private readonly host: ActorHost,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Runs once; later calls (a second SIGTERM) get the same result. */
  drain(): Promise<DrainResult> {
    this.draining ??= this.drainOnce();
    return this.draining;
  }

  private async drainOnce(): Promise<DrainResult> {
    const me = this.identity.name();
    const running = this.runner.inFlight();
    const ids = [...running.map((r) => r.episode.id), ...this.host.pendingResumes()];
    let stamped = 0;
    if (ids.length > 0) {
      const { rows } = await this.database.sql.query<{ id: string }>(STAMP, [ids]);
      stamped = rows.length;
      await this.claims.releaseAll(running.map((r) => claimKeyOf(r.episode)), me);
      await this.database.sql.query(MARK_INTERRUPTED, [rows.map((r) => r.id), me]);
    }
    for (const episode of running) episode.stop(new EpisodeInterruptedError(episode.episode.id));
    for (const episode of running) {
      this.telemetry.emit('episode.interrupted', {
        episodeId: episode.episode.id,
        actorId: episode.episode.actorId,
        expectationId: episode.episode.expectationId,
      });
    }

    const window = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), this.options.episodeShutdownMs).unref());
    await Promise.race([this.host.idle(), window]);
    const killed = this.runner.inFlight().length;
    if (killed > 0) this.logger.warn(`${killed} episode(s) still mid-step after ${this.options.episodeShutdownMs} ms: left to be killed with the process (already stamped)`);
    this.telemetry.emit('drain.completed', { stamped, killed });
    return { stamped, killed };
  }
}
