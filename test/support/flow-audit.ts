import type { Convergence, EpisodeContext } from '@cyclium/nestjs';
import type pg from 'pg';
import { waitFor } from './wait-for.js';

/** A limited expectation's payload in the flow tests. */
export interface AuditedJob {
  /** Which test wrote it: the audit of one test never mixes with another's. */
  run: string;
  customer?: string;
}

/** The table of runs: start and end of each run of a method, by the database clock. */
export const FLOW_AUDIT = `CREATE TABLE flow_audit (
    id bigserial PRIMARY KEY, run text NOT NULL, episode_id uuid NOT NULL, customer text,
    started_at timestamptz NOT NULL, ended_at timestamptz)`;

/** Runs `work` as one audited run of the episode's method. */
export async function audited(
  audit: pg.Pool,
  ep: EpisodeContext<AuditedJob>,
  work: () => Promise<void>,
): Promise<Convergence> {
  const { run, customer } = ep.trigger.payload;
  const { rows } = await audit.query<{ id: string }>(
    `INSERT INTO flow_audit (run, episode_id, customer, started_at)
     VALUES ($1, $2, $3, clock_timestamp()) RETURNING id`,
    [run, ep.episode.id, customer ?? null],
  );
  await work();
  await audit.query(`UPDATE flow_audit SET ended_at = clock_timestamp() WHERE id = $1`, [
    rows[0]!.id,
  ]);
  return { summary: 'ok' };
}

/** The most runs of `run` that overlapped at any instant (per customer when `byCustomer`). */
export async function peak(db: pg.Pool, run: string, byCustomer = false): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT coalesce(max(n), 0)::int AS n FROM (
       SELECT (SELECT count(*) FROM flow_audit b
                WHERE b.run = a.run AND b.started_at <= a.started_at
                  AND coalesce(b.ended_at, 'infinity') > a.started_at
                  ${byCustomer ? 'AND b.customer IS NOT DISTINCT FROM a.customer' : ''}) AS n
         FROM flow_audit a WHERE a.run = $1) x`,
    [run],
  );
  return rows[0]!.n;
}

/** Waits until every episode of `ids` has ended `done`. */
export function allDone(db: pg.Pool, ids: string[], timeoutMs = 30_000): Promise<boolean> {
  return waitFor(
    `${ids.length} episodes to end done`,
    async () => {
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclium_episodes
          WHERE id = ANY($1::uuid[]) AND status = 'done'`,
        [ids],
      );
      return rows[0]!.n === ids.length;
    },
    timeoutMs,
  );
}
