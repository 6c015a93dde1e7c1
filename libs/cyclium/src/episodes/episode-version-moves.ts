import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { sameEnv, stackCovers } from '../scope/scope-predicates.js';
import { EpisodeJournal } from './episode-journal.js';

/** Which episodes a move takes, and who moves them. */
export interface VersionMove {
  actorId: string;
  expectationId: string;
  from: string;
  to: string;
  stack: string | null;
  env: string | null;
  /** A node that has not beaten for this long is gone: its running episodes are movable. */
  goneAfterMs: number;
  node: string;
}

/**
 * The episodes of one expectation and scope pinned to `from` that no live node runs now: waiting,
 * deferred, throttled or queued, or running on a node that is gone (an orphan recovery leaves to
 * its version). A live run keeps its version: its code is the one replaying it.
 */
const MOVE = `
  UPDATE cyclium_episodes e SET version = $4, updated_at = now()
   WHERE e.actor_id = $1 AND e.expectation_id = $2 AND e.version = $3
     AND ${stackCovers('e.source_stack', '$5')} AND ${sameEnv('e.source_env', '$6')}
     AND (e.status IN ('waiting', 'deferred', 'throttled', 'queued')
          OR e.status = 'running'
             AND NOT EXISTS (SELECT 1 FROM cyclium_nodes n
                              WHERE n.node_identity = e.owner_node
                                AND n.last_seen_at
                                      > now() - make_interval(secs => $7::double precision / 1000)))
  RETURNING e.id`;

/** Episodes in flight of one version, as the operations page counts them. */
export interface VersionInFlight {
  actorId: string;
  expectationId: string;
  version: string;
  /** By status: running, waiting, deferred, throttled, queued, blocked. */
  counts: Record<string, number>;
}

/**
 * The versions episodes in flight carry (read for the operator), and the operator's move of
 * episodes from one version of their expectation to another, each journaled with a
 * `version_moved` marker in the same transaction (on cyclium_episodes).
 */
@Injectable()
export class EpisodeVersionMoves {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly journal: EpisodeJournal,
  ) {}

  /** The versions of the episodes in flight of a scope, with their counts by status. */
  async inFlight(stack: string | null, env: string | null): Promise<VersionInFlight[]> {
    const { rows } = await this.database.sql.query<{
      actor_id: string;
      expectation_id: string;
      version: string;
      counts: Record<string, number>;
    }>(
      `SELECT actor_id, expectation_id, version, jsonb_object_agg(status, n) AS counts
         FROM (SELECT actor_id, expectation_id, version, status, count(*)::int AS n
                 FROM cyclium_episodes e
                WHERE version IS NOT NULL
                  AND status IN ('running', 'waiting', 'deferred', 'throttled', 'queued', 'blocked')
                  AND ${stackCovers('e.source_stack', '$1')} AND ${sameEnv('e.source_env', '$2')}
                GROUP BY actor_id, expectation_id, version, status) s
        GROUP BY actor_id, expectation_id, version
        ORDER BY actor_id, expectation_id, version`,
      [stack, env],
    );
    return rows.map((r) => ({
      actorId: r.actor_id,
      expectationId: r.expectation_id,
      version: r.version,
      counts: r.counts,
    }));
  }

  /** Moves them; returns their ids. */
  move(move: VersionMove): Promise<string[]> {
    return this.database.transaction(async (client) => {
      const { rows } = await client.query<{ id: string }>(MOVE, [
        move.actorId,
        move.expectationId,
        move.from,
        move.to,
        move.stack,
        move.env,
        move.goneAfterMs,
      ]);
      const ids = rows.map((r) => r.id);
      await this.journal.mark(
        ids,
        'version_moved',
        { from: move.from, to: move.to, node: move.node },
        client,
      );
      return ids;
    });
  }
}
