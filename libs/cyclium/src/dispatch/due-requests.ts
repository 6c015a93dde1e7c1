import { sameEnv, sameEnvIndexed, stackFilter } from '../scope/scope-predicates.js';
import {
  hostedParam,
  hostsExpectation,
  type HostedExpectations,
} from '../sql/hosted-expectations.js';

type QueryText = { text: string; values: unknown[] };

/**
 * The version the request's episode started on (a primary-key probe per request the poll reads):
 * a wake-up, a retry or a restart of a pinned episode is left to a node that runs its version.
 */
const EPISODE_VERSION = `(SELECT e.version FROM cyclium_episodes e WHERE e.id = episode_id)`;

/**
 * Which requests a poller (`me`) takes: its env (strictly), optionally one stack, and only the
 * expectations it can run (a wake-up of an expectation its actor's release here lacks is left to
 * a node that has it).
 */
export interface RequestFilter {
  env: string | null;
  stack: string | null;
  hosted: HostedExpectations;
  limit: number;
  me: string;
}

/** The TTL (`$ttl`, milliseconds) as an interval. */
function ttlInterval(ttl: string): string {
  return `make_interval(secs => ${ttl}::double precision / 1000)`;
}

/**
 * Who judges a request, all SQL expressions: its env, how long a beat stays fresh (ms), and the
 * judging node.
 */
export interface Judge {
  env: string;
  goneAfter: string;
  /**
   * The node asking, which counts as full whatever its row says yet (it takes requests); NULL when
   * it is not.
   */
  me: string;
}

/**
 * Since when some full node of the env has been up, by the database clock: the earliest start of
 * the full nodes beating within `goneAfter`; NULL while none is. A whole-env outage ends every
 * such run of beats, so the time it lasted counts for nothing.
 */
function fullNodeUpSince({ env, goneAfter, me }: Judge): string {
  return `(SELECT min(n.started_at) FROM cyclium_nodes n
            WHERE (n.mode = 'full' OR n.node_identity = ${me}::text) AND ${sameEnv('n.env', env)}
              AND n.last_seen_at
                    > now() - make_interval(secs => ${goneAfter}::double precision / 1000))`;
}

/** When a request to run now starts counting its TTL: infinity (never) while no full node is up. */
function ttlCountsFrom(judge: Judge): string {
  return `greatest(inserted_at, coalesce(${fullNodeUpSince(judge)}, 'infinity'))`;
}

/**
 * Whether a request may still be taken. One with a due time is accepted work (a run for later, a
 * retry's or a sleep's wake-up, an operator's retry, a restart recovery deferred, a trigger a
 * draining node handed over): it waits for a node that hosts it however long that takes, a
 * whole-cluster stop included. One without (a trigger-only node's run now, a workflow step) is
 * taken until the TTL has run while some full node of its env was up to look at it: from its
 * insert, or from when the first of them came up if later. `ttl` is the TTL in milliseconds.
 */
export function takeable(ttl: string, judge: Judge): string {
  return `(not_before IS NOT NULL OR ${ttlCountsFrom(judge)} >= now() - ${ttlInterval(ttl)})`;
}

/**
 * What the expiry ends: a request to run now that takeable refuses. The first condition is spelled
 * on `coalesce(not_before, inserted_at)`, although `not_before` is null here, so the expiry reads a
 * range of the due index (migration 15) rather than every waiting request; the second only
 * narrows it (greatest ≥ inserted_at).
 */
export function expirable(ttl: string, judge: Judge): string {
  return `not_before IS NULL AND coalesce(not_before, inserted_at) < now() - ${ttlInterval(ttl)}
          AND ${ttlCountsFrom(judge)} < now() - ${ttlInterval(ttl)}`;
}

/**
 * The requests a poller may take, oldest due first: a range of the due index (migration 15) up to
 * `horizonMs` from now, so requests due later are never read, of the expectations it hosts; each
 * row says whether it is due now (`due_now`) and in how long (`due_in_ms`, by the database clock),
 * so an idle poller learns when to look again from the same statement. A request to run now that
 * is past its TTL is skipped (it only expires, however soon the expiry runs); the expiry clears
 * those within a minute, so they are few.
 */
export function pendingStatement(
  filter: RequestFilter,
  ttlMs: number,
  goneAfterMs: number,
  horizonMs = 0,
): QueryText {
  return {
    text: `SELECT *, coalesce(not_before, inserted_at) <= now() AS due_now,
              (extract(epoch FROM coalesce(not_before, inserted_at) - now()) * 1000)::float8
                AS due_in_ms
         FROM cyclium_trigger_requests
        WHERE status IN ('pending', 'scheduled')
          AND ${sameEnvIndexed('source_env', '$1', filter.env)}
          AND ${stackFilter('source_stack', '$2')}
          AND ${hostsExpectation('actor_id', 'expectation_id', '$3', EPISODE_VERSION)}
          AND coalesce(not_before, inserted_at)
                <= now() + make_interval(secs => $8::double precision / 1000)
          AND ${takeable('$5', { env: '$1::text', goneAfter: '$6', me: '$7' })}
        ORDER BY coalesce(not_before, inserted_at), id
        LIMIT $4`,
    values: [
      filter.env,
      filter.stack,
      hostedParam(filter.hosted),
      filter.limit,
      ttlMs,
      goneAfterMs,
      filter.me,
      horizonMs,
    ],
  };
}
