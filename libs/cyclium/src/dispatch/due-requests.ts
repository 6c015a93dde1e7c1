import { sameEnvIndexed, stackFilter } from '../scope/scope-predicates.js';

/** Which requests a poller takes: its env (strictly), optionally one stack, and only actors it can run. */
export interface RequestFilter {
  env: string | null;
  stack: string | null;
  actors: string[];
  limit: number;
}

/**
 * The requests a poller may take now, oldest due first: a range of the due index (migration 15)
 * from the TTL back to now, so requests due later are never read. Past the TTL a request only
 * expires: it is never taken, however soon the expiry runs. A request that waits (`not_before`)
 * counts its TTL from when it may first be taken.
 */
export function pendingStatement(filter: RequestFilter, ttlMs: number): { text: string; values: unknown[] } {
  return {
    text: `SELECT * FROM cyclium_trigger_requests
        WHERE status IN ('pending', 'scheduled') AND ${sameEnvIndexed('source_env', '$1', filter.env)} AND ${stackFilter('source_stack', '$2')} AND actor_id = ANY($3::text[])
          AND coalesce(not_before, inserted_at) <= now()
          AND coalesce(not_before, inserted_at) >= now() - make_interval(secs => $5::double precision / 1000)
        ORDER BY coalesce(not_before, inserted_at), id
        LIMIT $4`,
    values: [filter.env, filter.stack, filter.actors, filter.limit, ttlMs],
  };
}
