import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { liveClaimOnEpisode } from '../claims/claim-sql.js';
import { sameEnv, stackCovers } from '../scope/scope-predicates.js';
import {
  hostedParam,
  neededEntry,
  hostsExpectation,
  type HostedExpectations,
} from '../sql/hosted-expectations.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeSignatures } from './episode-signatures.js';
import { oneEpisode, toEpisode } from './episode-store.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/**
 * The recovery policy recorded (by ActorDefinitionsStore) for the episode aliased `e`, as a SQL
 * expression, NULL when none is: its own stack and env's record first, then another stack's in its
 * env, then the record of a node of the previous release (`cyclium_actor_definitions`, by actor).
 */
export function recordedPolicyOf(e: string): string {
  return `coalesce(
    (SELECT x->>'recovery_policy'
     FROM cyclium_actor_scopes d, jsonb_array_elements(d.expectations) x
      WHERE d.actor_id = ${e}.actor_id
        AND coalesce(d.source_env, '') = coalesce(${e}.source_env, '')
        AND x->>'id' = ${e}.expectation_id
      ORDER BY (d.source_stack IS NOT DISTINCT FROM ${e}.source_stack) DESC, d.updated_at DESC
        LIMIT 1),
    (SELECT x->>'recovery_policy'
     FROM cyclium_actor_definitions d, jsonb_array_elements(d.expectations) x
      WHERE d.actor_id = ${e}.actor_id AND x->>'id' = ${e}.expectation_id LIMIT 1))`;
}

/** Where recovery looks, and what it must leave alone. */
export interface CandidateScope {
  stack: string | null;
  env: string | null;
  staleAfterMs: number;
  /** A node whose beat is older than this counts as gone. */
  goneAfterMs: number;
  /** With claims on, a claim decides whether a waiting restart is still protected. */
  claimsOn: boolean;
  /**
   * The expectations this node can restart, by actor; null when any row may be acted on (a sweep
   * of another stack defers restarts there). A row of another expectation (its actor's release
   * here may lack it) is read only when it will be failed.
   */
  hosted: HostedExpectations | null;
  /**
   * A `resolvePolicy` decides in code: a row of an unhosted actor may be one to fail, so all are
   * read.
   */
  policyInCode: boolean;
}

/** Where the adoption of gone nodes' queues looks. */
type QueueScope = Omit<CandidateScope, 'staleAfterMs' | 'claimsOn'>;

/**
 * Where the next page of candidates starts: after this staleness and id (the text keeps
 * microseconds).
 */
export interface CandidateCursor {
  quietSince: string;
  id: string;
}

export interface CandidatePage {
  episodes: EpisodeRow[];
  /** Null when the page was not full: nothing is left to read. */
  next: CandidateCursor | null;
}

/**
 * Running episodes nobody is working on: stamped `interrupted` by a drain, or with a journal (or
 * start) quieter than `staleAfterMs` by the database clock. A restart waiting for a slot
 * (`recovering`) on a node that is alive is left alone — with claims on, only while its claim is
 * live, so a restart whose node lost the claim (an outage, say) becomes recoverable again. The
 * phase of an ordinary run is NULL: the exclusion is NULL-safe, or it would drop every such run of
 * an owner that beats again (the default configuration's node restarted under its fixed identity).
 *
 * Read oldest-quiet first, in pages after a cursor, leaving out what this node cannot act on: a
 * restart of an expectation it does not host (the recorded policy says `restart` and attempts are
 * left), and, of an actor it hosts without that expectation (another release's, in a rolling
 * deploy), a row whose policy is not recorded (only a node of that release knows it). Without
 * that, a block of such rows (an actor removed while its episodes ran) would fill every page and
 * hide the orphans behind it. No index serves the order: the quiet time comes from the
 * journal, computed for every running row by the staleness test anyway; the sort is a top-N of
 * the rows that passed.
 */
export const CANDIDATES = `
  SELECT e.*, q.quiet_since::text AS quiet_since FROM cyclium_episodes e
   CROSS JOIN LATERAL (
     SELECT coalesce((SELECT max(s.created_at) FROM cyclium_episode_steps s
                      WHERE s.episode_id = e.id),
                     e.started_at, e.inserted_at) AS quiet_since) q
   WHERE e.status = 'running'
     AND ${stackCovers('e.source_stack', '$1')}
     AND ${sameEnv('e.source_env', '$2')}
     AND (e.phase IS NOT DISTINCT FROM 'interrupted'
          OR q.quiet_since < now() - make_interval(secs => $3::double precision / 1000))
     AND NOT (e.phase IS NOT DISTINCT FROM 'recovering'
              AND EXISTS (SELECT 1 FROM cyclium_nodes n
                           WHERE n.node_identity = e.owner_node
                             AND n.last_seen_at
                                   > now() - make_interval(secs => $4::double precision / 1000))
              AND (NOT $5::boolean
                   OR ${liveClaimOnEpisode('e')}))
     AND ($6::jsonb IS NULL
          OR ${hostsExpectation('e.actor_id', 'e.expectation_id', '$6', 'e.version')}
          OR $7::boolean
          OR e.attempts >= e.max_attempts
          OR coalesce(${recordedPolicyOf('e')},
                      CASE WHEN $6::jsonb ? e.actor_id THEN 'unknown' ELSE 'fail' END) = 'fail')
     AND ($8::timestamptz IS NULL OR (q.quiet_since, e.id) > ($8::timestamptz, $9::uuid))
   ORDER BY q.quiet_since, e.id
   LIMIT $10`;

/**
 * The node that decides "not hosted" (NOT_HOSTED): since when it has watched, and the beat gap that
 * ends a watch.
 */
export interface NotHostedWatcher {
  node: string;
  /** The database time since which it has beaten without a gap (NodeRegistry.watchingSince). */
  since: string;
  gapMs: number;
}

/** Rows per page of CANDIDATES and per batch of NOT_HOSTED. */
export const RECOVERY_PAGE = 500;

/**
 * Running or queued episodes of an expectation (actor and expectation) that neither this node ($3,
 * a jsonb HostedExpectations) nor any node of their stack and env has declared within the grace
 * period ($4 ms), quiet for as long, and held by no live claim: no node will ever run them. The
 * time an expectation was last declared is the newest beat of a node listing it (a crashed node's
 * row stays; a drained one deleted its row, but stamped its runs as it went, so their own quiet
 * time covers it); a node that is only late with its beat during a deploy still counts. A NULL
 * actor list (a node from before the column) declares everything; a node whose expectation list
 * is not its own process's (NULL: a release from before that column; another boot id: written by
 * this tree, then left by an older release that took the identity over) declares every
 * expectation of its actors (see NodeRegistry.register).
 * Silence counts only while this node ($7) watched: it has beaten without a gap since $8 (its
 * boot, or its return from an outage) for the grace period, and its last beat is recent ($9 ms),
 * so the time a whole env was stopped (or its database away) is never taken for nobody hosting
 * the work, and the first service back does not fail another's work before its nodes return.
 * Taken with SKIP LOCKED in id order and failed on the status as read, so sweeps of several nodes
 * at once each fail a row at most once, and a restart taken meanwhile (which touches updated_at)
 * is left alone. `$6` is a format() string given the actor, the expectation and the last owner.
 */
export const NOT_HOSTED = `
  WITH stranded AS (
    SELECT e.id FROM cyclium_episodes e
     WHERE e.status IN ('running', 'queued', 'throttled')
       AND ${stackCovers('e.source_stack', '$1')}
       AND ${sameEnv('e.source_env', '$2')}
       AND NOT ${hostsExpectation('e.actor_id', 'e.expectation_id', '$3', 'e.version')}
       AND greatest(e.updated_at,
                    coalesce((SELECT max(s.created_at) FROM cyclium_episode_steps s
                              WHERE s.episode_id = e.id),
                             e.started_at,
                             e.inserted_at))
                               < now() - make_interval(secs => $4::double precision / 1000)
       AND NOT EXISTS (SELECT 1 FROM cyclium_nodes n
                        WHERE ${sameEnv('n.env', 'e.source_env')}
                          AND ${stackCovers('e.source_stack', 'n.stack')}
                          AND (n.actors IS NULL
                               OR e.actor_id = ANY(n.actors)
                                  AND (n.expectations IS NULL
                                       OR n.expectations ->> 'boot' IS DISTINCT FROM n.boot_id::text
                                       OR coalesce((n.expectations -> 'hosted' -> e.actor_id) ?
                                                   ${neededEntry('e.expectation_id', 'e.version')},
                                                   false)))
                          AND n.last_seen_at
                                > now() - make_interval(secs => $4::double precision / 1000))
       AND NOT ${liveClaimOnEpisode('e')}
       AND $8::timestamptz < now() - make_interval(secs => $4::double precision / 1000)
       AND EXISTS (SELECT 1 FROM cyclium_nodes w
                    WHERE w.node_identity = $7
                      AND w.last_seen_at
                            > now() - make_interval(secs => $9::double precision / 1000))
     ORDER BY e.id
     LIMIT $5
     FOR UPDATE OF e SKIP LOCKED)
  UPDATE cyclium_episodes e
     SET status = 'failed', error_class = 'not_hosted', phase = NULL, finished_at = now(),
         updated_at = now(),
         error_detail = format($6::text, e.actor_id, e.expectation_id,
                               coalesce(e.owner_node, 'no node'))
    FROM stranded
   WHERE e.id = stranded.id AND e.status IN ('running', 'queued', 'throttled')
  RETURNING e.*`;

/**
 * Queued episodes of expectations this node hosts whose node stopped beating (or deregistered when
 * it drained).
 */
const ORPHANED_QUEUED = `
  SELECT e.* FROM cyclium_episodes e
   WHERE e.status = 'queued'
     AND ${hostsExpectation('e.actor_id', 'e.expectation_id', '$5', 'e.version')}
     AND ${stackCovers('e.source_stack', '$1')}
     AND ${sameEnv('e.source_env', '$2')}
     AND e.owner_node IS DISTINCT FROM $4
     AND NOT EXISTS (SELECT 1 FROM cyclium_nodes n
                      WHERE n.node_identity = e.owner_node
                        AND n.last_seen_at
                              > now() - make_interval(secs => $3::double precision / 1000))
   LIMIT 500`;

/**
 * Rule 6: one conditional UPDATE on the state as read; zero rows means another node has it. The
 * attempt it counts is signed ($5, see EpisodeRecoveryStore.take): the count it was signed for is
 * the one read ($3 + 1), and the signature read ($6) is part of the state: an `integrity` cut-over
 * that signed the row since this node read it unsigned must not be overwritten by a judgement of
 * the unsigned read.
 */
const TAKE = `
  UPDATE cyclium_episodes
     SET phase = 'recovering', attempts = attempts + 1, owner_node = $4, updated_at = now(),
         signature = $5
   WHERE id = $1 AND status = ${KEYED_RUNNING} AND phase IS NOT DISTINCT FROM $2 AND attempts = $3
     AND signature IS NOT DISTINCT FROM $6
  RETURNING *`;

/**
 * The statements on `cyclium_episodes` that recovery and the drain run: finding the episodes
 * nobody works on, taking them on the state as read, adopting a gone node's queue, and stamping a
 * draining node's runs for a restart elsewhere.
 */
@Injectable()
export class EpisodeRecoveryStore {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly signatures: EpisodeSignatures,
  ) {}

  /** A restart recovery took on a node that cannot run it: it waits as deferred for a full node. */
  async deferRestart(client: SqlExecutor, id: string): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_episodes SET status = 'deferred', owner_node = NULL, updated_at = now()
        WHERE id = $1 AND status = ${KEYED_RUNNING} AND phase = 'recovering'`,
      [id],
    );
    return rowCount === 1;
  }

  /**
   * Fails an episode recovery took and still holds (phase `recovering`), inside the recovery's
   * transaction.
   */
  async failOrphaned(client: SqlExecutor, id: string, detail: string): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_episodes
          SET status = 'failed', error_class = 'orphaned', error_detail = $2, phase = NULL,
              finished_at = now(), updated_at = now()
        WHERE id = $1 AND status = ${KEYED_RUNNING} AND phase = 'recovering'`,
      [id, detail],
    );
    return rowCount === 1;
  }

  /**
   * A page of running episodes nobody works on, in this node's stack and env, oldest-quiet first
   * (CANDIDATES).
   */
  async candidates(scope: CandidateScope, after: CandidateCursor | null): Promise<CandidatePage> {
    const { rows } = await this.database.sql.query<
      Record<string, unknown> & { quiet_since: string }
    >(CANDIDATES, [
      scope.stack,
      scope.env,
      scope.staleAfterMs,
      scope.goneAfterMs,
      scope.claimsOn,
      scope.hosted && hostedParam(scope.hosted),
      scope.policyInCode,
      after?.quietSince ?? null,
      after?.id ?? null,
      RECOVERY_PAGE,
    ]);
    const last = rows.at(-1);
    const next =
      rows.length === RECOVERY_PAGE && last
        ? { quietSince: last.quiet_since, id: last.id as string }
        : null;
    return { episodes: rows.map(toEpisode), next };
  }

  /**
   * Fails a batch of episodes no node will run (NOT_HOSTED) as `not_hosted`, inside the caller's
   * transaction; `detail` is a format() string given the actor, the expectation and the last owner.
   */
  async failNotHosted(
    client: SqlExecutor,
    scope: Pick<CandidateScope, 'stack' | 'env'>,
    hosted: HostedExpectations,
    graceMs: number,
    detail: string,
    watcher: NotHostedWatcher,
  ): Promise<EpisodeRow[]> {
    const { rows } = await client.query(NOT_HOSTED, [
      scope.stack,
      scope.env,
      hostedParam(hosted),
      graceMs,
      RECOVERY_PAGE,
      detail,
      watcher.node,
      watcher.since,
      watcher.gapMs,
    ]);
    return rows.map(toEpisode);
  }

  /**
   * Takes a candidate for this node's recovery, on the state it was read in; null when another node
   * got there. The attempt it counts is re-signed only when the row as read is accepted: a forged
   * or edited row keeps the signature it had, and its run refuses it (`tampered`) before its method
   * runs.
   */
  async take(
    client: SqlExecutor,
    candidate: EpisodeRow,
    owner: string,
  ): Promise<EpisodeRow | null> {
    const counted = { ...candidate, attempts: candidate.attempts + 1 };
    const signature = this.signatures.accepts(candidate)
      ? this.signatures.sign(counted)
      : candidate.signature;
    const { rows } = await client.query(TAKE, [
      candidate.id,
      candidate.phase,
      candidate.attempts,
      owner,
      signature,
      candidate.signature,
    ]);
    return oneEpisode(rows);
  }

  /** Queued episodes of expectations this node hosts, left behind by a node that is gone. */
  async orphanedQueued(
    scope: QueueScope,
    owner: string,
    hosted: HostedExpectations,
  ): Promise<EpisodeRow[]> {
    const params = [scope.stack, scope.env, scope.goneAfterMs, owner, hostedParam(hosted)];
    const { rows } = await this.database.sql.query(ORPHANED_QUEUED, params);
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
      // In id order, as a batch of terminal writes locks them (finishEpisodes).
      `WITH locked AS (
         SELECT id FROM cyclium_episodes WHERE id = ANY($1::uuid[]) AND status = ${KEYED_RUNNING}
           ORDER BY id FOR UPDATE)
       UPDATE cyclium_episodes e SET phase = 'interrupted', updated_at = now()
         FROM locked
        WHERE e.id = locked.id
       RETURNING e.id`,
      [ids],
    );
    return rows.map((r) => r.id);
  }
}
