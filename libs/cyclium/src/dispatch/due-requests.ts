import { sameEnvIndexed, stackFilter } from '../scope/scope-predicates.js';

/** Which requests a poller takes: its env (strictly), optionally one stack, and only actors it can run. */
export interface RequestFilter {
  env: string | null;
  stack: string | null;
  actors: string[];
  limit: number;
}

/**
 * Whether a request may still be taken: one with a due time (a run for later, a retry's backoff,
 * a sleep, a workflow step's backoff) waits for a node that hosts its actor however long that
 * takes, a whole-cluster stop included; one without (a trigger-only node's, to run now) only
 * within the TTL, after which it only expires. `$ttl` is the TTL in milliseconds.
 */
export function takeable(ttl: string): string {
  return `(not_before IS NOT NULL OR inserted_at >= now() - make_interval(secs => ${ttl}::double precision / 1000))`;
}

/**
 * What the expiry ends: a request to run now that no node took within the TTL (one takeable
 * refuses). Spelled on `coalesce(not_before, inserted_at)`, although `not_before` is null here,
 * so the expiry reads a range of the due index (migration 15) rather than every waiting request.
 */
export function expirable(ttl: string): string {
  return `not_before IS NULL AND coalesce(not_before, inserted_at) < now() - make_interval(secs => ${ttl}::double precision / 1000)`;
}

/**
 * The requests a poller may take now, oldest due first: a range of the due index (migration 15)
 * up to now, so requests due later are never read. A request to run now that is past the TTL is
 * skipped (it only expires, however soon the expiry runs); the expiry clears those within a
 * minute, so they are few.
 */
export function pendingStatement(filter: RequestFilter, ttlMs: number): { text: string; values: unknown[] } {
  return {
    text: `SELECT * FROM cyclium_trigger_requests
        WHERE status IN ('pending', 'scheduled') AND ${sameEnvIndexed('source_env', '$1', filter.env)} AND ${stackFilter('source_stack', '$2')} AND actor_id = ANY($3::text[])
          AND coalesce(not_before, inserted_at) <= now() AND ${takeable('$5')}
        ORDER BY coalesce(not_before, inserted_at), id
        LIMIT $4`,
    values: [filter.env, filter.stack, filter.actors, filter.limit, ttlMs],
  };
}
