import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { ActorHost } from '../actors/actor-host.service.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import { WorkClaims } from '../claims/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { OutageLog, errorMessage } from '../database/database-errors.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { claimKeyOf, toEpisode } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { RecoveryPolicy, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';

export interface SweepOptions {
  /** Default: `recovery.staleAfterMs`. */
  staleAfterMs?: number;
  /** Default: this node's stack (unset: every stack). Rows with no stack match any stack. */
  sourceStack?: string | null;
  /** Default: this node's env; matched strictly (`null` is the default env). */
  sourceEnv?: string | null;
  /** Decides the policy per episode, ahead of the expectation's `recoveryPolicy`. */
  resolvePolicy?: (episode: EpisodeRow) => RecoveryPolicy;
}

export interface SweepResult {
  restarted: number;
  failed: number;
  skipped: number;
}

export interface LastSweep {
  at: Date;
  result: SweepResult | null;
  error: string | null;
}

export const CANDIDATES = `
  SELECT e.* FROM cyclium_episodes e
   WHERE e.status = 'running'
     AND ($1::text IS NULL OR e.source_stack = $1 OR e.source_stack IS NULL)
     AND e.source_env IS NOT DISTINCT FROM $2
     AND (e.phase = 'interrupted'
          OR coalesce((SELECT max(s.created_at) FROM cyclium_episode_steps s WHERE s.episode_id = e.id),
                      e.started_at, e.inserted_at) < now() - make_interval(secs => $3::double precision / 1000))
   LIMIT 500`;

/** Queued episodes whose node stopped beating (or deregistered when it drained). */
const ORPHANED_QUEUED = `
  SELECT e.* FROM cyclium_episodes e
   WHERE e.status = 'queued'
     AND ($1::text IS NULL OR e.source_stack = $1 OR e.source_stack IS NULL)
     AND e.source_env IS NOT DISTINCT FROM $2
     AND e.owner_node IS DISTINCT FROM $4
     AND NOT EXISTS (SELECT 1 FROM cyclium_nodes n
                      WHERE n.node_identity = e.owner_node
                        AND n.last_seen_at > now() - make_interval(secs => $3::double precision / 1000))
   LIMIT 500`;

/** Rule 6: one conditional UPDATE on the state as read; zero rows means another node has it. */
const TAKE = `
  UPDATE cyclium_episodes SET phase = 'recovering', attempts = attempts + 1, owner_node = $4, updated_at = now()
   WHERE id = $1 AND status = 'running' AND phase IS NOT DISTINCT FROM $2 AND attempts = $3
  RETURNING *`;

const MARK = `
  INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
  SELECT $1, coalesce(max(step_no), 0) + 1, 'observation', $2, $3::jsonb FROM cyclium_episode_steps WHERE episode_id = $1`;

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/**
 * Finds episodes orphaned by a crash (quiet journal) or a drain (phase `interrupted`) and takes
 * each over exactly once across the cluster: claim first (a live holder means skip), then one
 * conditional UPDATE, then restart (queued under the actor's limit, resumed from checkpoints) or
 * fail as `orphaned`, per policy and `maxAttempts`.
 */
@Injectable()
export class Recovery implements OnApplicationBootstrap {
  private readonly logger = new Logger(Recovery.name);
  private timer: NodeJS.Timeout | undefined;
  private readonly outage = new OutageLog(this.logger, 'recovery sweep');
  private last: LastSweep | null = null;
  /** Sweeps on one node run one after another, each with its own options. */
  private sweeps: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly host: ActorHost,
    private readonly runner: EpisodeRunner,
    private readonly registry: ActorRegistry,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onApplicationBootstrap(): void {
    const { onBoot, settleMs, intervalMs } = this.options.recovery;
    if (this.options.mode !== 'full' || !onBoot) return;
    const next = (delay: number) => {
      this.timer = setTimeout(async () => {
        await this.sweepQuietly();
        if (intervalMs !== null && this.timer !== undefined) next(intervalMs);
      }, delay);
      this.timer.unref();
    };
    next(settleMs);
  }

  /** Stops the boot and interval sweeps (the drain calls it first) and waits for one in flight. */
  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.sweeps;
  }

  /** One pass over the given scope (default: this node's). Calls on one node queue behind each other. */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    const pass = this.sweeps.then(() => this.sweepOnce(options)).then(
      (result) => {
        this.last = { at: new Date(), result, error: null };
        return result;
      },
      (error: unknown) => {
        this.last = { at: new Date(), result: null, error: errorMessage(error) };
        throw error;
      },
    );
    this.sweeps = pass.catch(() => undefined);
    return pass;
  }

  private async sweepQuietly(): Promise<void> {
    try {
      await this.sweep();
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }

  /** The last sweep this node ran: when (database-independent wall clock), and how it went. */
  lastSweep(): LastSweep | null {
    return this.last;
  }

  private async sweepOnce(options: SweepOptions): Promise<SweepResult> {
    const staleAfterMs = options.staleAfterMs ?? this.options.recovery.staleAfterMs;
    const stack = options.sourceStack === undefined ? this.options.stackSlug : options.sourceStack;
    const env = options.sourceEnv === undefined ? this.options.env : options.sourceEnv;
    const me = this.identity.name();
    const result: SweepResult = { restarted: 0, failed: 0, skipped: 0 };
    const local = new Set(this.runner.inFlight().map((r) => r.episode.id));

    const { rows } = await this.database.sql.query(CANDIDATES, [stack, env, staleAfterMs]);
    for (const candidate of shuffle(rows.map(toEpisode)).filter((e) => !local.has(e.id))) {
      const outcome = await this.recover(candidate, me, options).catch((error: unknown) => {
        this.logger.warn(`recovery of episode ${candidate.id} failed: ${(error as Error).message}`);
        return 'skipped' as const;
      });
      result[outcome]++;
    }

    // A node's liveness beat is slower than a short staleAfterMs; never call a beating node gone.
    const goneAfterMs = Math.max(staleAfterMs, 3 * this.options.nodeBeatIntervalMs);
    const queued = await this.database.sql.query(ORPHANED_QUEUED, [stack, env, goneAfterMs, me]);
    for (const episode of shuffle(queued.rows.map(toEpisode))) {
      const adopted = await this.database.sql.query(
        `UPDATE cyclium_episodes SET owner_node = $3, updated_at = now()
          WHERE id = $1 AND status = 'queued' AND owner_node IS NOT DISTINCT FROM $2 RETURNING *`,
        [episode.id, episode.ownerNode, me],
      );
      if (adopted.rowCount === 1 && this.host.adoptQueued(toEpisode(adopted.rows[0]))) result.restarted++;
      else result.skipped++;
    }
    this.telemetry.emit('recovery.sweep', result);
    return result;
  }

  private async recover(candidate: EpisodeRow, me: string, options: SweepOptions): Promise<keyof SweepResult> {
    const key = claimKeyOf(candidate);
    const grant = await this.claims.acquire(key, me, { workType: 'recovery' });
    if (grant.status === 'busy') return 'skipped'; // a live holder: never recover it
    const fence = grant.status === 'acquired' ? grant.claim.fence : null;

    const taken = await this.database.sql.query(TAKE, [candidate.id, candidate.phase, candidate.attempts, me]);
    if (taken.rowCount !== 1) {
      if (fence !== null) await this.claims.complete(key, me, fence);
      return 'skipped';
    }
    const episode = toEpisode(taken.rows[0]);
    const policy = await this.policyFor(episode, options.resolvePolicy);
    if (policy === 'restart' && episode.attempts <= episode.maxAttempts) {
      await this.database.sql.query(MARK, [
        episode.id,
        'resumed',
        JSON.stringify({ event: 'resumed', attempt: episode.attempts, node: me, from: candidate.phase ?? 'stale' }),
      ]);
      // The shipped adapter is not re-entrant: the restart must find this claim finished, not held.
      if (fence !== null) await this.claims.complete(key, me, fence);
      this.host.resume(episode);
      return 'restarted';
    }
    await this.failOrphaned(episode, key, me, fence, policy);
    return 'failed';
  }

  private async failOrphaned(episode: EpisodeRow, key: string, me: string, fence: number | null, policy: RecoveryPolicy): Promise<void> {
    const detail =
      policy === 'restart'
        ? `orphaned: attempt ${episode.attempts} is past max_attempts ${episode.maxAttempts}`
        : `orphaned: recovery policy is fail (last seen on ${episode.ownerNode ?? 'unknown'})`;
    const announce = await this.database.transaction<Announce | null>(async (client) => {
      const updated = await client.query(
        `UPDATE cyclium_episodes
            SET status = 'failed', error_class = 'orphaned', error_detail = $2, phase = NULL, finished_at = now(), updated_at = now()
          WHERE id = $1 AND status = 'running' AND phase = 'recovering'`,
        [episode.id, detail],
      );
      if (updated.rowCount !== 1) return null;
      await client.query(MARK, [episode.id, 'orphaned', JSON.stringify({ event: 'orphaned', node: me })]);
      await this.claims.failWithin(client, key, me, fence, detail);
      return this.events.within(client, [lifecycleEvent('episode.failed', episode, 'failed', me, { errorClass: 'orphaned' })]);
    });
    if (!announce) return;
    announce();
    this.telemetry.emit('episode.failed', {
      episodeId: episode.id,
      actorId: episode.actorId,
      expectationId: episode.expectationId,
      errorClass: 'orphaned',
    });
  }

  /** `resolvePolicy`, else the expectation's `recoveryPolicy`, else the actor's stored definition, else `fail`. */
  private async policyFor(episode: EpisodeRow, resolve = this.options.recovery.resolvePolicy): Promise<RecoveryPolicy> {
    if (resolve) return resolve(episode);
    const declared = this.registry.expectation(episode.actorId, episode.expectationId)?.options.recoveryPolicy;
    if (declared) return declared;
    const { rows } = await this.database.sql.query<{ policy: RecoveryPolicy | null }>(
      `SELECT x->>'recovery_policy' AS policy
         FROM cyclium_actor_definitions d, jsonb_array_elements(d.expectations) x
        WHERE d.actor_id = $1 AND x->>'id' = $2`,
      [episode.actorId, episode.expectationId],
    );
    return rows[0]?.policy === 'restart' ? 'restart' : 'fail';
  }
}
