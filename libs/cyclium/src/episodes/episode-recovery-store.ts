import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../database/sql-executor.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { oneEpisode, toEpisode } from './episode-store.js';

/** Where recovery looks, and what it must leave alone. */
export interface CandidateScope {
  stack: string | null;
  env: string | null;
  staleAfterMs: number;
  /** A node whose beat is older than this counts as gone. */
  goneAfterMs: number;
  /** With claims on, a claim decides whether a waiting restart is still protected. */
  claimsOn: boolean;
}

/**
 * Running episodes nobody is working on: stamped `interrupted` by a drain, or with a journal (or
 * start) quieter than `staleAfterMs` by the database clock. A restart waiting for a slot
 * (`recovering`) on a node that is alive is left alone — with claims on, only while its claim is
 * live, so a restart whose node lost the claim (an outage, say) becomes recoverable again. The
 * phase of an ordinary run is NULL: the exclusion is NULL-safe, or it would drop every such run of
 * an owner that beats again (the default configuration's node restarted under its fixed identity).
 */
export const CANDIDATES = `
  SELECT e.* FROM cyclium_episodes e
   WHERE e.status = 'running'
     AND ($1::text IS NULL OR e.source_stack = $1 OR e.source_stack IS NULL)
     AND e.source_env IS NOT DISTINCT FROM $2
     AND (e.phase = 'interrupted'
          OR coalesce((SELECT max(s.created_at) FROM cyclium_episode_steps s WHERE s.episode_id = e.id),
                      e.started_at, e.inserted_at) < now() - make_interval(secs => $3::double precision / 1000))
     AND NOT (e.phase IS NOT DISTINCT FROM 'recovering'
              AND EXISTS (SELECT 1 FROM cyclium_nodes n
                           WHERE n.node_identity = e.owner_node
                             AND n.last_seen_at > now() - make_interval(secs => $4::double precision / 1000))
              AND (NOT $5::boolean
                   OR EXISTS (SELECT 1 FROM cyclium_work_claims c
                               WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
                                 AND c.state = 'claimed' AND c.lease_until > now())))
   LIMIT 500`;

/** Queued episodes of actors this node hosts whose node stopped beating (or deregistered when it drained). */
const ORPHANED_QUEUED = `
  SELECT e.* FROM cyclium_episodes e
   WHERE e.status = 'queued'
     AND e.actor_id = ANY($5::text[])
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

/**
 * The statements on `cyclium_episodes` that recovery and the drain run: finding the episodes
 * nobody works on, taking them on the state as read, adopting a gone node's queue, and stamping a
 * draining node's runs for a restart elsewhere.
 */
@Injectable()
export class EpisodeRecoveryStore {
  constructor(private readonly database: CycliumDataSource) {}

  /** A restart recovery took on a node that cannot run it: it waits as deferred for a full node. */
  async deferRestart(client: SqlExecutor, id: string): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_episodes SET status = 'deferred', owner_node = NULL, updated_at = now()
        WHERE id = $1 AND status = 'running' AND phase = 'recovering'`,
      [id],
    );
    return rowCount === 1;
  }

  /** Fails an episode recovery took and still holds (phase `recovering`), inside the recovery's transaction. */
  async failOrphaned(client: SqlExecutor, id: string, detail: string): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_episodes
          SET status = 'failed', error_class = 'orphaned', error_detail = $2, phase = NULL, finished_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'running' AND phase = 'recovering'`,
      [id, detail],
    );
    return rowCount === 1;
  }

  /** Running episodes nobody works on, in this node's stack and env (CANDIDATES). */
  async candidates(scope: CandidateScope): Promise<EpisodeRow[]> {
    const { rows } = await this.database.sql.query(CANDIDATES, [scope.stack, scope.env, scope.staleAfterMs, scope.goneAfterMs, scope.claimsOn]);
    return rows.map(toEpisode);
  }

  /** Takes a candidate for this node's recovery, on the state it was read in; null when another node got there. */
  async take(client: SqlExecutor, candidate: EpisodeRow, owner: string): Promise<EpisodeRow | null> {
    return oneEpisode((await client.query(TAKE, [candidate.id, candidate.phase, candidate.attempts, owner])).rows);
  }

  /** Queued episodes of actors this node hosts, left behind by a node that is gone. */
  async orphanedQueued(scope: Omit<CandidateScope, 'staleAfterMs' | 'claimsOn'>, owner: string, hostedActors: string[]): Promise<EpisodeRow[]> {
    const { rows } = await this.database.sql.query(ORPHANED_QUEUED, [scope.stack, scope.env, scope.goneAfterMs, owner, hostedActors]);
    return rows.map(toEpisode);
  }

  /** Moves a queued episode of a gone node into this node's queue; null when it moved on. */
  async adopt(episode: EpisodeRow, owner: string): Promise<EpisodeRow | null> {
    const { rows } = await this.database.sql.query(
      `UPDATE cyclium_episodes SET owner_node = $3, updated_at = now()
        WHERE id = $1 AND status = 'queued' AND owner_node IS NOT DISTINCT FROM $2 RETURNING *`,
      [episode.id, episode.ownerNode, owner],
    );
    return oneEpisode(rows);
  }

  /** Stamps running episodes `interrupted`, so peers restart them without waiting for staleness. */
  async stampInterrupted(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const { rows } = await this.database.sql.query<{ id: string }>(
      // In id order, as a batch of terminal writes locks them (finishManyFragments).
      `WITH locked AS (
         SELECT id FROM cyclium_episodes WHERE id = ANY($1::uuid[]) AND status = 'running' ORDER BY id FOR UPDATE)
       UPDATE cyclium_episodes e SET phase = 'interrupted', updated_at = now()
         FROM locked
        WHERE e.id = locked.id
       RETURNING e.id`,
      [ids],
    );
    return rows.map((r) => r.id);
  }
}
