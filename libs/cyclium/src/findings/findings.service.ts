import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../database/sql-executor.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { Env } from '../scope/env.service.js';
import type { CycliumFinding, FindingStatus } from './finding.entity.js';
import type { FindingAction } from './finding-action.interface.js';

export interface FindingFilters {
  actorId?: string;
  class?: string;
  subject?: string;
  key?: string;
}

function toFinding(row: Record<string, unknown>): CycliumFinding {
  return {
    id: row.id as string,
    actorId: row.actor_id as string,
    expectationId: row.expectation_id as string | null,
    findingKey: row.finding_key as string,
    status: row.status as FindingStatus,
    class: row.class as string | null,
    severity: row.severity as string | null,
    subject: row.subject as string | null,
    summary: row.summary as string | null,
    evidence: row.evidence,
    raisedByEpisodeId: row.raised_by_episode_id as string | null,
    clearedByEpisodeId: row.cleared_by_episode_id as string | null,
    env: row.env as string | null,
    raisedAt: row.raised_at as Date,
    clearedAt: row.cleared_at as Date | null,
    updatedAt: row.updated_at as Date,
  };
}

/** Findings persist with the episode's env: each env has its own active finding per key. */
@Injectable()
export class Findings {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly env: Env,
  ) {}

  /**
   * Active findings matching `filters`, in `options.env` (default: this node's env; `null` is the
   * default env, compared strictly).
   */
  async activeFor(filters: FindingFilters = {}, options: { env?: string | null } = {}): Promise<CycliumFinding[]> {
    const env = options.env === undefined ? this.env.current() : options.env;
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_findings
        WHERE status = 'active' AND env IS NOT DISTINCT FROM $1
          AND ($2::text IS NULL OR actor_id = $2) AND ($3::text IS NULL OR class = $3)
          AND ($4::text IS NULL OR subject = $4) AND ($5::text IS NULL OR finding_key = $5)
        ORDER BY raised_at, id`,
      [env, filters.actorId ?? null, filters.class ?? null, filters.subject ?? null, filters.key ?? null],
    );
    return rows.map(toFinding);
  }

  /** Applies an episode's finding actions on `client`, inside its post-converge transaction. */
  async persist(client: SqlExecutor, episode: EpisodeRow, actions: FindingAction[]): Promise<void> {
    for (const action of actions) {
      if (action.op === 'clear') {
        await client.query(
          `UPDATE cyclium_findings SET status = 'cleared', cleared_at = now(), cleared_by_episode_id = $3, updated_at = now()
            WHERE finding_key = $1 AND env IS NOT DISTINCT FROM $2 AND status = 'active'`,
          [action.key, episode.sourceEnv, episode.id],
        );
        continue;
      }
      const fields = [action.class ?? null, action.severity ?? null, action.subject ?? null, action.summary ?? null];
      const evidence = action.evidence === undefined ? null : JSON.stringify(action.evidence);
      if (action.op === 'update') {
        await client.query(
          `UPDATE cyclium_findings
              SET class = coalesce($3, class), severity = coalesce($4, severity), subject = coalesce($5, subject),
                  summary = coalesce($6, summary), evidence = coalesce($7::jsonb, evidence), updated_at = now()
            WHERE finding_key = $1 AND env IS NOT DISTINCT FROM $2 AND status = 'active'`,
          [action.key, episode.sourceEnv, ...fields, evidence],
        );
        continue;
      }
      await client.query(
        `INSERT INTO cyclium_findings
           (actor_id, expectation_id, finding_key, status, class, severity, subject, summary, evidence, raised_by_episode_id, env)
         VALUES ($1, $2, $3, 'active', $4, $5, $6, $7, $8::jsonb, $9, $10)
         ON CONFLICT (finding_key, env) WHERE status = 'active' DO UPDATE
           SET class = EXCLUDED.class, severity = EXCLUDED.severity, subject = EXCLUDED.subject,
               summary = EXCLUDED.summary, evidence = EXCLUDED.evidence, updated_at = now()`,
        [episode.actorId, episode.expectationId, action.key, ...fields, evidence, episode.id, episode.sourceEnv],
      );
    }
  }
}
