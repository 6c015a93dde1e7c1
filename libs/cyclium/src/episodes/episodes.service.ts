import { Inject, Injectable } from '@nestjs/common';
import { ActorDefinitionError } from '../actors/actor-definition.error.js';
import { ActorHost, type DispatchResult } from '../actors/actor-host.service.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import type { CycliumEpisodeStep } from './episode-step.entity.js';
import type { EpisodeStatus } from './episode.entity.js';
import type { EpisodeRow, EpisodeTrigger } from './episode-context.interface.js';
import { EpisodeRunner } from './episode-runner.service.js';
import { CANCEL_EVENT } from './episode-events.js';
import { EpisodeStore, toEpisode } from './episode-store.js';

export interface TriggerOptions {
  /** Makes the trigger idempotent: a second trigger with the same key while the first is live is a duplicate. Scoped by env. */
  dedupeKey?: string;
  /** Default: this node's stack. An explicit null stamps the row with no stack. */
  sourceStack?: string | null;
  /** Default: this node's env. An explicit null targets the default env. */
  sourceEnv?: string | null;
}

export interface CreateEpisode {
  actorId: string;
  expectationId: string;
  triggerType?: EpisodeTrigger['type'];
  payload?: unknown;
  status?: EpisodeStatus;
  dedupeKey?: string | null;
  startedAt?: Date | null;
  ownerNode?: string | null;
  maxAttempts?: number;
  sourceStack?: string | null;
  sourceEnv?: string | null;
}

export interface ListEpisodes {
  actorId?: string;
  status?: EpisodeStatus;
  /** Default 50, at most 500. */
  limit?: number;
  /** `nextCursor` of the previous page. */
  cursor?: string;
}

export type CancelResult = 'canceled' | 'requested' | 'finished' | 'not_found';

const pick = <T>(explicit: T | undefined, fallback: T): T => (explicit === undefined ? fallback : explicit);

/** Episodes for hosts and UIs: start one, read them, cancel one from any node. */
@Injectable()
export class Episodes {
  constructor(
    private readonly host: ActorHost,
    private readonly registry: ActorRegistry,
    private readonly store: EpisodeStore,
    private readonly database: CycliumDataSource,
    private readonly identity: NodeIdentity,
    private readonly runner: EpisodeRunner,
    private readonly events: EventOutbox,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Runs an expectation now on this node (under its actor's concurrency limit). */
  async trigger<P>(actorId: string, expectationId: string, payload: P, options: TriggerOptions = {}): Promise<DispatchResult> {
    const expectation = this.registry.expectation(actorId, expectationId);
    if (!expectation) throw new ActorDefinitionError(`no actor ${actorId} with expectation ${expectationId} on this node`);
    if (this.options.mode !== 'full') throw new ActorDefinitionError(`this node runs in mode ${this.options.mode}, not full`);
    const sourceEnv = pick(options.sourceEnv, this.options.env);
    return this.host.dispatch(expectation, { type: 'manual', payload }, {
      dedupeKey: options.dedupeKey === undefined ? null : scopeKey(options.dedupeKey, sourceEnv),
      sourceStack: pick(options.sourceStack, this.options.stackSlug),
      sourceEnv,
      jitter: false,
    });
  }

  /**
   * Inserts an episode row without running it (seeding, tests, acting on another env). Stack and
   * env default to this node's; an explicit value wins, `null` included.
   */
  async create(params: CreateEpisode): Promise<EpisodeRow> {
    const status = params.status ?? 'running';
    const { rows } = await this.database.sql.query(
      `INSERT INTO cyclium_episodes
         (actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node, max_attempts,
          source_stack, source_env, started_at, queued_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $6 = 'queued' THEN now() END)
       RETURNING *`,
      [
        params.actorId,
        params.expectationId,
        params.triggerType ?? 'manual',
        JSON.stringify({ type: params.triggerType ?? 'manual', payload: params.payload ?? {} }),
        params.dedupeKey ?? null,
        status,
        pick(params.ownerNode, status === 'running' ? this.identity.name() : null),
        params.maxAttempts ?? 3,
        pick(params.sourceStack, this.options.stackSlug),
        pick(params.sourceEnv, this.options.env),
        pick(params.startedAt, status === 'running' ? new Date() : null),
      ],
    );
    return toEpisode(rows[0]);
  }

  get(id: string): Promise<EpisodeRow | null> {
    return this.store.get(id);
  }

  /** Newest first, by keyset pages. */
  async list(query: ListEpisodes = {}): Promise<{ items: EpisodeRow[]; nextCursor: string | null }> {
    const limit = Math.min(Math.max(query.limit ?? 50, 1), 500);
    const [afterAt, afterId] = query.cursor
      ? (JSON.parse(Buffer.from(query.cursor, 'base64url').toString('utf8')) as [string, string])
      : [null, null];
    const { rows } = await this.database.sql.query(
      // The cursor keeps inserted_at as the database prints it: a JS Date would drop the
      // microseconds and skip rows inserted within the same millisecond.
      `SELECT *, inserted_at::text AS cursor_at FROM cyclium_episodes
        WHERE ($1::text IS NULL OR actor_id = $1) AND ($2::text IS NULL OR status = $2)
          AND ($3::timestamptz IS NULL OR (inserted_at, id) < ($3::timestamptz, $4::uuid))
        ORDER BY inserted_at DESC, id DESC
        LIMIT $5`,
      [query.actorId ?? null, query.status ?? null, afterAt, afterId, limit + 1],
    );
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const nextCursor =
      rows.length > limit && last ? Buffer.from(JSON.stringify([last.cursor_at, last.id])).toString('base64url') : null;
    const items = page.map(toEpisode);
    return { items, nextCursor };
  }

  /** The journal: steps and markers, in order. */
  async steps(id: string): Promise<CycliumEpisodeStep[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_episode_steps WHERE episode_id = $1 ORDER BY step_no`,
      [id],
    );
    return rows.map((r: Record<string, unknown>) => ({
      episodeId: r.episode_id as string,
      stepNo: r.step_no as number,
      kind: r.kind as string,
      name: r.name as string,
      resultRef: r.result_ref,
      errorClass: r.error_class as string | null,
      durationMs: r.duration_ms as number | null,
      createdAt: r.created_at as Date,
    }));
  }

  /**
   * Cancels from any node: a queued episode is canceled at once; a running one is asked (over the
   * bus) to stop before its next step, and its node records `canceled`.
   */
  async cancel(id: string): Promise<CancelResult> {
    if (await this.runner.cancelQueued(id)) return 'canceled';
    const episode = await this.store.get(id);
    if (!episode) return 'not_found';
    if (episode.status !== 'running') return 'finished';
    await this.events.publish(CANCEL_EVENT, { episodeId: id });
    return 'requested';
  }
}
