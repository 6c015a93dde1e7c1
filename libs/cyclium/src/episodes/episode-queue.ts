import { Inject, Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import { sameEnv, sameStack } from '../scope/scope-predicates.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { oneEpisode } from './episode-store.js';
import { CANCELED_REQUESTS, type CanceledRequests } from './canceled-requests.interface.js';

/**
 * The oldest queued episode of one actor on one node, locked; only of the expectations `$3` lists
 * (text[]) when given. A head that a concurrent statement is moving (a cancel, a peer's take) is
 * waited for and re-read, and when it is no longer queued the next row is taken in its place:
 * without the lock the statement would pick the head from its snapshot, lose it to the cancel, and
 * answer "nothing queued" while rows wait behind it. NO KEY UPDATE is the lock the update takes
 * anyway, so it conflicts with nothing more.
 */
const queueHead = (expectations: string) => `SELECT id FROM cyclium_episodes
                 WHERE status = 'queued' AND owner_node = $1 AND actor_id = $2${expectations}
                 ORDER BY queued_at, id LIMIT 1
                 FOR NO KEY UPDATE`;
const QUEUE_HEAD = queueHead('');

/**
 * The next queued episode of one actor on one node, oldest first, moved to running: of an
 * expectation this node runs ($3), as a row queued before a deploy may not be.
 */
const DEQUEUE = prepared(
  'episodes_dequeue',
  `UPDATE cyclium_episodes SET status = 'running', started_at = now(), updated_at = now()
    WHERE id = (${queueHead(' AND expectation_id = ANY($3::text[])')})
      AND status = 'queued'
   RETURNING *`,
);

/**
 * A queued episode of one actor that another node holds in its queue, moved to running here (a
 * peer with a free slot takes work off a full node). The newest: the owner takes its own queue
 * oldest first, so the two meet only on its last row, where the loser's "nothing left" is true.
 * SKIP LOCKED keeps two takers off one row (a loser would stop looking while rows remain); the
 * conditional update still decides. Same stack and env only (rule 8), and only of an expectation
 * this node runs ($5).
 */
const TAKE_FROM_PEER = prepared(
  'episodes_take_from_peer',
  `UPDATE cyclium_episodes
    SET status = 'running', owner_node = $1, started_at = now(), updated_at = now()
    WHERE id = (SELECT id FROM cyclium_episodes
                 WHERE status = 'queued' AND actor_id = $2 AND expectation_id = ANY($5::text[])
                   AND owner_node IS DISTINCT FROM $1
                   AND ${sameStack('source_stack', '$3')} AND ${sameEnv('source_env', '$4')}
                 ORDER BY queued_at DESC, id DESC LIMIT 1
                 FOR UPDATE SKIP LOCKED)
      AND status = 'queued'
   RETURNING *`,
);

/** Expectation ids. */
type Ids = readonly string[];

/**
 * Who a take serves: the taking node, the actor and the expectations of it the node runs (a
 * text[]), how many rows at most, and which queue: the node's own, or its peers', whose rows must
 * share this node's stack and env (rule 8).
 */
export type TakeRefs = { owner: string; actorId: string; expectations: string; limit: string } & (
  { from: 'own' } | { from: 'peer'; stack: string; env: string }
);

/**
 * DEQUEUE and TAKE_FROM_PEER for up to `limit` rows, as the CTEs `head` (the rows, locked) and
 * `ep` (them moved to running, `RETURNING *`) of a composed statement (QueuedBegins), with the same
 * locking and the same order: a node's own queue oldest first, waiting for a head that moves; a
 * peer's newest first, skipping rows another taker has locked.
 */
export function takeQueued(refs: TakeRefs): Array<[string, string]> {
  const head =
    refs.from === 'own'
      ? `SELECT id FROM cyclium_episodes
          WHERE status = 'queued' AND owner_node = ${refs.owner} AND actor_id = ${refs.actorId}
            AND expectation_id = ANY(${refs.expectations})
          ORDER BY queued_at, id LIMIT ${refs.limit}
          FOR NO KEY UPDATE`
      : `SELECT id FROM cyclium_episodes
          WHERE status = 'queued' AND actor_id = ${refs.actorId}
            AND expectation_id = ANY(${refs.expectations})
            AND owner_node IS DISTINCT FROM ${refs.owner}
            AND ${sameStack('source_stack', refs.stack)} AND ${sameEnv('source_env', refs.env)}
          ORDER BY queued_at DESC, id DESC LIMIT ${refs.limit}
          FOR UPDATE SKIP LOCKED`;
  return [
    ['head', head],
    [
      'ep',
      `UPDATE cyclium_episodes e
        SET status = 'running', owner_node = ${refs.owner}, started_at = now(), updated_at = now()
         FROM head WHERE e.id = head.id AND e.status = 'queued'
       RETURNING e.*`,
    ],
  ];
}

/**
 * The statements on `cyclium_episodes` that treat it as each node's queue: rows `queued` with the
 * node as owner, taken oldest first as slots free, and by a peer with a free slot newest first.
 */
@Injectable()
export class EpisodeQueue {
  constructor(
    private readonly database: CycliumDataSource,
    @Inject(CANCELED_REQUESTS) private readonly requests: CanceledRequests,
  ) {}

  /**
   * Takes this node's oldest queued episode of `actorId` (of one of its expectations `ids`) and
   * moves it to running; null when none is left.
   */
  async dequeue(
    actorId: string,
    ids: Ids,
    owner: string,
    via = this.database.sql,
  ): Promise<EpisodeRow | null> {
    return oneEpisode((await via.query(DEQUEUE([owner, actorId, ids]))).rows);
  }

  /**
   * Takes the newest episode of `actorId` (of one of its `expectations`) queued on another node, in
   * this stack and env, and moves it to running here; null when none is left.
   */
  async takeFromPeer(
    actorId: string,
    expectations: readonly string[],
    owner: string,
    scope: { stack: string | null; env: string | null },
    via: SqlExecutor = this.database.sql,
  ): Promise<EpisodeRow | null> {
    return oneEpisode(
      (await via.query(TAKE_FROM_PEER([owner, actorId, scope.stack, scope.env, expectations])))
        .rows,
    );
  }

  /**
   * The actors with episodes waiting in this node's queue (a node back under the same identity has
   * a backlog).
   */
  async actorsWithQueued(owner: string): Promise<string[]> {
    const { rows } = await this.database.sql.query<{ actor_id: string }>(
      `SELECT DISTINCT actor_id FROM cyclium_episodes WHERE status = 'queued' AND owner_node = $1`,
      [owner],
    );
    return rows.map((r) => r.actor_id);
  }

  /**
   * actorsWithQueued at boot: a database away meanwhile (a failover) is waited for
   * (CycliumDataSource.atBoot).
   */
  backlogAtBoot(owner: string): Promise<string[]> {
    return this.database.atBoot('reading the queued backlog', () => this.actorsWithQueued(owner));
  }

  /** How many episodes of `actorId` wait in this node's queue. */
  async queuedCount(actorId: string, owner: string): Promise<number> {
    const { rows } = await this.database.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status = 'queued' AND owner_node = ` +
        `$1 AND actor_id = $2`,
      [owner, actorId],
    );
    return rows[0]?.n ?? 0;
  }

  /**
   * The oldest queued episode of `actorId` on this node, canceled with its requests still to run
   * (see CanceledRequests); null when there is none.
   */
  async cancelOldestQueued(
    actorId: string,
    owner: string,
    via: SqlExecutor,
  ): Promise<EpisodeRow | null> {
    const { rows } = await via.query(
      `WITH canceled AS (
         UPDATE cyclium_episodes
            SET status = 'canceled', finished_at = now(), updated_at = now(),
                error_class = 'canceled'
          WHERE id = (${QUEUE_HEAD})
            AND status = 'queued'
          RETURNING *),
       requests AS (${this.requests.completeFor('canceled')})
       SELECT * FROM canceled`,
      [owner, actorId],
    );
    return oneEpisode(rows);
  }
}
