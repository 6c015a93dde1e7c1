import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared, type SqlExecutor } from '../database/sql-executor.js';
import type { EpisodeStatus } from './episode.entity.js';
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

export interface Checkpoint {
  name: string;
  state: unknown;
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
 * The rest of a fenced `WITH owner AS (...)` statement (see WorkClaims.fencedStatement): one
 * journal row and one checkpoint, written only while the claim is owned, as one commit.
 */
export const STEP_WRITE = {
  name: 'episodes_step_write',
  body: `,
  journal AS (
    INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref, duration_ms)
    SELECT $4, $5, 'step', $6, $7::jsonb, $8 FROM owner RETURNING 1
  ),
  checkpoint AS (
    INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state)
    SELECT $4, $9, $6, $7::jsonb FROM owner RETURNING 1
  )
  SELECT count(*)::int AS written FROM journal`,
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
    insertedAt: row.inserted_at as Date,
    updatedAt: row.updated_at as Date,
  };
}

/** The claim key of an episode: its dedupe key, or its id when it has none. */
export function claimKeyOf(episode: Pick<EpisodeRow, 'id' | 'dedupeKey'>): string {
  return episode.dedupeKey ?? `episode:${episode.id}`;
}

/** Raw SQL for episode rows: inserts, status moves, the journal's reads. */
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
    return rows[0] ? toEpisode(rows[0]) : null;
  }

  /** Moves a queued episode to running on this node; null when it is no longer queued (canceled, say). */
  async dequeue(id: string, owner: string, via: SqlExecutor = this.database.sql): Promise<EpisodeRow | null> {
    const { rows } = await via.query(
      `UPDATE cyclium_episodes SET status = 'running', owner_node = $2, started_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'queued' RETURNING *`,
      [id, owner],
    );
    return rows[0] ? toEpisode(rows[0]) : null;
  }

  /** Takes a recovered episode (phase `recovering`) for this node's restart; null when it moved on. */
  async takeForResume(id: string, owner: string, via: SqlExecutor = this.database.sql): Promise<EpisodeRow | null> {
    const { rows } = await via.query(
      `UPDATE cyclium_episodes SET phase = NULL, owner_node = $2, updated_at = now()
        WHERE id = $1 AND status = 'running' AND phase = 'recovering' RETURNING *`,
      [id, owner],
    );
    return rows[0] ? toEpisode(rows[0]) : null;
  }

  /** Cancels a queued episode; null when it was not queued any more. */
  async cancelQueued(id: string, via: SqlExecutor = this.database.sql): Promise<EpisodeRow | null> {
    const { rows } = await via.query(
      `UPDATE cyclium_episodes SET status = 'canceled', finished_at = now(), updated_at = now(), error_class = 'canceled'
        WHERE id = $1 AND status = 'queued' RETURNING *`,
      [id],
    );
    return rows[0] ? toEpisode(rows[0]) : null;
  }

  async get(id: string): Promise<EpisodeRow | null> {
    const { rows } = await this.database.sql.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id]);
    return rows[0] ? toEpisode(rows[0]) : null;
  }

  /** Checkpointed step results by step number, for a resumed run. */
  async checkpoints(id: string): Promise<Map<number, Checkpoint>> {
    const { rows } = await this.database.sql.query<{ checkpoint_no: number; phase: string; state: { v?: unknown } }>(
      `SELECT checkpoint_no, phase, state FROM cyclium_episode_checkpoints WHERE episode_id = $1 ORDER BY checkpoint_no`,
      [id],
    );
    return new Map(rows.map((r) => [r.checkpoint_no, { name: r.phase, state: r.state?.v }]));
  }

  /** The next free journal position (markers such as `resumed` take positions too). */
  async nextJournalNo(id: string): Promise<number> {
    const { rows } = await this.database.sql.query<{ next: number }>(
      `SELECT coalesce(max(step_no), 0)::int + 1 AS next FROM cyclium_episode_steps WHERE episode_id = $1`,
      [id],
    );
    return rows[0].next;
  }
}
