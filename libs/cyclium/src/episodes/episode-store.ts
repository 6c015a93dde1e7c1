import { Injectable } from '@nestjs/common';
import type { FencedStatement } from '../leases/claims-in-statement.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { EpisodeRow, EpisodeTrigger } from './episode-context.interface.js';

export interface NewEpisode {
  actorId: string;
  expectationId: string;
  trigger: EpisodeTrigger;
  dedupeKey: string | null;
  status: Extract<EpisodeStatus, 'running' | 'queued'>;
  ownerNode: string | null;
  maxAttempts: number;
  sourceStack: string | null;
  sourceEnv: string | null;
  workflowInstanceId?: string | null;
  workflowStepId?: string | null;
}

/** A row written as it is, for seeding and tests (`Episodes.create`). */
export interface SeedEpisode {
  actorId: string;
  expectationId: string;
  triggerType: EpisodeTrigger['type'];
  payload: unknown;
  status: EpisodeStatus;
  dedupeKey: string | null;
  ownerNode: string | null;
  maxAttempts: number;
  sourceStack: string | null;
  sourceEnv: string | null;
  /** null: the database clock, when the row is running. */
  startedAt: Date | null;
}

/** How a run ended, as its terminal write records it. */
export interface TerminalOutcome {
  status: EpisodeStatus;
  summary?: string | null;
  classification?: unknown;
  errorClass?: string | null;
  detail?: string | null;
}

export interface EpisodePage {
  actorId?: string;
  status?: EpisodeStatus;
  limit: number;
  /** `[inserted_at as the database prints it, id]` of the last row of the previous page. */
  after?: [string, string];
}

const INSERT = prepared(
  'episodes_insert',
  `INSERT INTO cyclium_episodes
     (actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node, max_attempts,
      source_stack, source_env, workflow_instance_id, workflow_step_id, started_at, queued_at)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
           CASE WHEN $6 = 'running' THEN now() END, CASE WHEN $6 = 'queued' THEN now() END)
   ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING
   RETURNING *`,
);

/**
 * The first write of a restarted run, fenced (continues `WITH owner AS (...)`, see
 * WorkClaims.fencedStatement): it leaves phase `recovering` only while the handed-over claim is
 * still this node's.
 */
export const RESUME_START: FencedStatement = {
  name: 'episodes_resume_start',
  body: `
  UPDATE cyclium_episodes SET phase = NULL, owner_node = $2, updated_at = now()
    FROM owner
   WHERE cyclium_episodes.id = $4 AND status = 'running' AND phase = 'recovering' AND owner_node = $2
  RETURNING cyclium_episodes.*`,
};

/** Maps a `cyclium_episodes` row as pg returns it onto the entity's shape. */
export function toEpisode(row: Record<string, unknown>): EpisodeRow {
  return {
    id: row.id as string,
    actorId: row.actor_id as string,
    expectationId: row.expectation_id as string,
    triggerType: row.trigger_type as string,
    triggerRef: row.trigger_ref as Record<string, unknown>,
    dedupeKey: row.dedupe_key as string | null,
    status: row.status as EpisodeStatus,
    phase: row.phase as string | null,
    attempts: row.attempts as number,
    maxAttempts: row.max_attempts as number,
    errorClass: row.error_class as string | null,
    errorDetail: row.error_detail as string | null,
    summary: row.summary as string | null,
    classification: row.classification,
    ownerNode: row.owner_node as string | null,
    workflowInstanceId: row.workflow_instance_id as string | null,
    workflowStepId: row.workflow_step_id as string | null,
    sourceStack: row.source_stack as string | null,
    sourceEnv: row.source_env as string | null,
    startedAt: row.started_at as Date | null,
    finishedAt: row.finished_at as Date | null,
    queuedAt: row.queued_at as Date | null,
    archivedAt: row.archived_at as Date | null,
    cancelRequestedAt: (row.cancel_requested_at as Date | null | undefined) ?? null,
    insertedAt: row.inserted_at as Date,
    updatedAt: row.updated_at as Date,
  };
}

/** The first row mapped, or null when there is none. */
export const oneEpisode = (rows: Array<Record<string, unknown>>): EpisodeRow | null => (rows[0] ? toEpisode(rows[0]) : null);

/**
 * The statements on cyclium_episodes that create, move and read episodes: inserts, status
 * moves, terminal writes, lookups. The queue's are in EpisodeQueue, recovery's and the drain's in
 * EpisodeRecoveryStore: the three are the only rooms that write this table. `via` is a client
 * inside the caller's transaction where the write must commit with others; the pool otherwise.
 */
@Injectable()
export class EpisodeStore {
  constructor(private readonly database: CycliumDataSource) {}

  /** Inserts unless a live episode already has the dedupe key; null when another insert won. */
  async insert(spec: NewEpisode, via: SqlExecutor = this.database.sql): Promise<EpisodeRow | null> {
    const { rows } = await via.query(
      INSERT([
        spec.actorId,
        spec.expectationId,
        spec.trigger.type,
        JSON.stringify(spec.trigger),
        spec.dedupeKey,
        spec.status,
        spec.ownerNode,
        spec.maxAttempts,
        spec.sourceStack,
        spec.sourceEnv,
        spec.workflowInstanceId ?? null,
        spec.workflowStepId ?? null,
      ]),
    );
    return oneEpisode(rows);
  }

  // ── fragments of the one-round-trip statements (see EpisodeStatements) ──────────────────────

  /**
   * Inserts episode `id` when `when` holds — `running` (started now, on `spec.ownerNode`) or
   * `deferred` (waiting for a full node, owned by none); the dedupe index still decides.
   */
  insertFragment(statement: Statement, id: string, spec: NewEpisode, when: string, status: 'running' | 'deferred' = 'running'): string {
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const running = status === 'running';
    return `
      INSERT INTO cyclium_episodes
        (id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node, max_attempts,
         source_stack, source_env, workflow_instance_id, workflow_step_id, started_at, queued_at)
      SELECT ${p(id, 'uuid')}, ${p(spec.actorId, 'text')}, ${p(spec.expectationId, 'text')}, ${p(spec.trigger.type, 'text')},
             ${p(JSON.stringify(spec.trigger), 'jsonb')}, ${p(spec.dedupeKey, 'text')}, '${status}', ${p(running ? spec.ownerNode : null, 'text')},
             ${p(spec.maxAttempts, 'int')}, ${p(spec.sourceStack, 'text')}, ${p(spec.sourceEnv, 'text')},
             ${p(spec.workflowInstanceId ?? null, 'uuid')}, ${p(spec.workflowStepId ?? null, 'text')},
             ${running ? 'now(), NULL' : 'NULL, now()'}
       WHERE (${when})
      ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING
      RETURNING *`;
  }

  /**
   * `insertFragment` (running, started now) for every row of the CTE `input` (columns `id`, `key`,
   * `actor_id`, `expectation_id`, `trigger_type`, `trigger_ref`, `dedupe_key`, `owner_node`,
   * `max_attempts`, `source_stack`, `source_env`, `workflow_instance_id`, `workflow_step_id`), in
   * key order, so two batches that meet on dedupe keys wait for each other instead of deadlocking.
   */
  insertManyFragment(input: string): string {
    return `
      INSERT INTO cyclium_episodes
        (id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node, max_attempts,
         source_stack, source_env, workflow_instance_id, workflow_step_id, started_at)
      SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, 'running', owner_node, max_attempts,
             source_stack, source_env, workflow_instance_id, workflow_step_id, now()
        FROM ${input}
       ORDER BY key
      ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING
      RETURNING *`;
  }

  /** A deferred episode a full node took: running here now. Null when it is not deferred any more (or gone). */
  async startDeferred(client: SqlExecutor, id: string, owner: string): Promise<EpisodeRow | null> {
    const { rows } = await client.query(
      `UPDATE cyclium_episodes SET status = 'running', owner_node = $2, phase = NULL, started_at = coalesce(started_at, now()), updated_at = now()
        WHERE id = $1 AND status = 'deferred' RETURNING *`,
      [id, owner],
    );
    return oneEpisode(rows);
  }

  /** Deferred episodes whose request expired: failed, with the request's reason; returns them. */
  async failDeferred(client: SqlExecutor, failures: Array<{ episodeId: string; reason: string }>): Promise<EpisodeRow[]> {
    if (failures.length === 0) return [];
    const { rows } = await client.query(
      `UPDATE cyclium_episodes e
          SET status = 'failed', error_class = 'trigger_request_expired', error_detail = f.reason, finished_at = now(), updated_at = now()
         FROM unnest($1::uuid[], $2::text[]) AS f (id, reason)
        WHERE e.id = f.id AND e.status = 'deferred'
       RETURNING e.*`,
      [failures.map((f) => f.episodeId), failures.map((f) => f.reason)],
    );
    return rows.map(toEpisode);
  }

  /** What became of an episode a request names: its status, or null when the row is gone. */
  async statusOf(client: SqlExecutor, id: string): Promise<EpisodeStatus | null> {
    const { rows } = await client.query<{ status: EpisodeStatus }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]);
    return rows[0]?.status ?? null;
  }

  /**
   * The terminal write of a run, joined to the CTE `owner` (no row, no write): `done` or
   * `partially_failed` with its summary, or `failed` / `canceled` with its error.
   */
  finishFragment(statement: Statement, id: string, outcome: TerminalOutcome): string {
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    return `
      UPDATE cyclium_episodes
         SET status = ${p(outcome.status, 'text')}, summary = coalesce(${p(outcome.summary ?? null, 'text')}, summary),
             classification = coalesce(${p(outcome.classification === undefined ? null : JSON.stringify(outcome.classification), 'jsonb')}, classification),
             error_class = ${p(outcome.errorClass ?? null, 'text')}, error_detail = ${p(outcome.detail ?? null, 'text')},
             phase = NULL, finished_at = now(), updated_at = now()
        FROM owner
       WHERE cyclium_episodes.id = ${p(id, 'uuid')} AND cyclium_episodes.status = 'running'
      RETURNING cyclium_episodes.id`;
  }

  /**
   * `finishFragment` for every row of the CTE `input` (columns `episode_id`, `status`, `summary`,
   * `classification`, `error_class`, `error_detail`) that is still running, as CTEs, the last named
   * `ep` (`RETURNING id`). The rows are locked in id order first, as the drain's stamp locks them,
   * so a batch and a stamp wait for each other instead of deadlocking.
   */
  finishManyFragments(input: string): Array<[string, string]> {
    return [
      [
        'ep_locked',
        `SELECT e.id FROM cyclium_episodes e JOIN ${input} i ON i.episode_id = e.id
          WHERE e.status = 'running' ORDER BY e.id FOR UPDATE OF e`,
      ],
      [
        'ep',
        `UPDATE cyclium_episodes e
            SET status = i.status, summary = coalesce(i.summary, e.summary), classification = coalesce(i.classification, e.classification),
                error_class = i.error_class, error_detail = i.error_detail, phase = NULL, finished_at = now(), updated_at = now()
           FROM ep_locked l JOIN ${input} i ON i.episode_id = l.id
          WHERE e.id = l.id
         RETURNING e.id`,
      ],
    ];
  }

  /** Writes a row as given; `started_at` defaults to the database clock (rule 1) for a running row. */
  async seed(spec: SeedEpisode): Promise<EpisodeRow> {
    const { rows } = await this.database.sql.query(
      `INSERT INTO cyclium_episodes
         (actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, owner_node, max_attempts,
          source_stack, source_env, started_at, queued_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
               coalesce($11, CASE WHEN $6 = 'running' THEN now() END), CASE WHEN $6 = 'queued' THEN now() END)
       RETURNING *`,
      [
        spec.actorId,
        spec.expectationId,
        spec.triggerType,
        JSON.stringify({ type: spec.triggerType, payload: spec.payload }),
        spec.dedupeKey,
        spec.status,
        spec.ownerNode,
        spec.maxAttempts,
        spec.sourceStack,
        spec.sourceEnv,
        spec.startedAt,
      ],
    );
    return toEpisode(rows[0] as Record<string, unknown>);
  }

  /** Cancels the episodes of `ids` that have not started yet (queued or deferred); returns them. */
  async cancelWaiting(ids: readonly string[], via: SqlExecutor = this.database.sql): Promise<EpisodeRow[]> {
    if (ids.length === 0) return [];
    const { rows } = await via.query(
      `UPDATE cyclium_episodes SET status = 'canceled', finished_at = now(), updated_at = now(), error_class = 'canceled',
              cancel_requested_at = coalesce(cancel_requested_at, now())
        WHERE id = ANY($1::uuid[]) AND status IN ('queued', 'deferred') RETURNING *`,
      [ids],
    );
    return rows.map(toEpisode);
  }

  /** Asks the nodes running `ids` to stop them (the flag their next step write reads back); returns the ids still running. */
  async requestCancel(ids: readonly string[], via: SqlExecutor = this.database.sql): Promise<string[]> {
    if (ids.length === 0) return [];
    const { rows } = await via.query<{ id: string }>(
      `UPDATE cyclium_episodes SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
        WHERE id = ANY($1::uuid[]) AND status IN ('running', 'blocked') RETURNING id`,
      [ids],
    );
    return rows.map((r) => r.id);
  }

  /** Whether a cancel was requested for the episode (a run that wrote no step reads it once, at its end). */
  async cancelRequested(id: string): Promise<boolean> {
    const { rows } = await this.database.sql.query<{ requested: boolean }>(
      `SELECT cancel_requested_at IS NOT NULL AS requested FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    return rows[0]?.requested === true;
  }

  /** Which of `keys` a live episode holds (the dedupe index's own condition): one statement for many. */
  async heldDedupeKeys(keys: readonly string[]): Promise<Set<string>> {
    if (keys.length === 0) return new Set();
    const { rows } = await this.database.sql.query<{ dedupe_key: string }>(
      `SELECT dedupe_key FROM cyclium_episodes WHERE dedupe_key = ANY($1::text[]) AND archived_at IS NULL`,
      [keys],
    );
    return new Set(rows.map((r) => r.dedupe_key));
  }

  async get(id: string): Promise<EpisodeRow | null> {
    return oneEpisode((await this.database.sql.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows);
  }

  async getMany(ids: readonly string[]): Promise<EpisodeRow[]> {
    if (ids.length === 0) return [];
    return (await this.database.sql.query(`SELECT * FROM cyclium_episodes WHERE id = ANY($1::uuid[])`, [ids])).rows.map(toEpisode);
  }

  /** Newest first, by keyset; returns one row more than asked when there is a next page. */
  async page(query: EpisodePage): Promise<Array<{ episode: EpisodeRow; cursorAt: string }>> {
    const [afterAt, afterId] = query.after ?? [null, null];
    const { rows } = await this.database.sql.query(
      // The cursor keeps inserted_at as the database prints it: a JS Date would drop the
      // microseconds and skip rows inserted within the same millisecond.
      `SELECT *, inserted_at::text AS cursor_at FROM cyclium_episodes
        WHERE ($1::text IS NULL OR actor_id = $1) AND ($2::text IS NULL OR status = $2)
          AND ($3::timestamptz IS NULL OR (inserted_at, id) < ($3::timestamptz, $4::uuid))
        ORDER BY inserted_at DESC, id DESC
        LIMIT $5`,
      [query.actorId ?? null, query.status ?? null, afterAt, afterId, query.limit + 1],
    );
    return rows.map((r: Record<string, unknown>) => ({ episode: toEpisode(r), cursorAt: r.cursor_at as string }));
  }
}
