import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import { sameEnv, stackCovers } from '../scope/scope-predicates.js';
import { toOutput } from './output-row.js';

/** `now() + ms` by the database clock, from a parameter reference. */
const after = (ms: string) => `now() + make_interval(secs => ${ms}::double precision / 1000)`;

/**
 * Whether the output row `o` was written by the end statement of the episode that owns it: the
 * insert and the episode's terminal write share a transaction, so its `inserted_at` is the
 * episode's `finished_at` (both `now()`). A row inserted by anyone else, before or after, is not
 * delivered. A writer who copies both columns by hand still passes: signed rows close that.
 */
export const OWNED_OUTPUT = (o: string) =>
  `EXISTS (SELECT 1 FROM cyclium_episodes oe WHERE oe.id = ${o}.episode_id AND oe.finished_at = ` +
  `${o}.inserted_at)`;

/**
 * A due row in the scope of a node whose stack and env are the references `stack` and `env`: its
 * env strictly (NULL, the default env, included), its stack or none. An output is delivered by a
 * node of its episode's scope, through that scope's adapter, never by an `rc` node for production.
 */
const DUE = (o: string, types: string, stack: string, env: string) =>
  `${o}.status = 'pending' AND ${o}.next_attempt_at <= now() AND ${o}.type = ANY(${types}::text[])
   AND ${sameEnv(`${o}.source_env`, `${env}::text`)}
   AND ${stackCovers(`${o}.source_stack`, `${stack}::text`)}`;

/**
 * Takes due rows of the types this node hosts, in its scope (DUE), oldest due first, in one
 * conditional UPDATE: each counts an attempt, names this node and moves `next_attempt_at` to the
 * lease's end. A node that loses a race waits on the row and then finds it no longer due (READ
 * COMMITTED re-reads the predicate on the row it waited for), so two nodes never hold one row. A
 * row whose last allowed attempt never finished (its lease ran out) ends `failed` in the same
 * statement, and so does a row its episode's end did not write (OWNED_OUTPUT), undelivered.
 * Parameters: owner, types, limit, max attempts, lease ms, the node's stack and env.
 */
export const TAKE_DUE = `
  WITH due AS (
    SELECT id, ${OWNED_OUTPUT('d')} AS owned FROM cyclium_outputs d
     WHERE ${DUE('d', '$2', '$6', '$7')}
     ORDER BY next_attempt_at
     LIMIT $3)
  UPDATE cyclium_outputs o
     SET attempts = o.attempts + (due.owned AND o.attempts < $4)::int,
         status = CASE WHEN due.owned AND o.attempts < $4 THEN 'pending' ELSE 'failed' END,
         lease_owner = CASE WHEN due.owned AND o.attempts < $4 THEN $1::text END,
         next_attempt_at = CASE WHEN due.owned AND o.attempts < $4 THEN ${after('$5')}
           ELSE o.next_attempt_at END,
         error = CASE
           WHEN NOT due.owned
             THEN 'not written by the end of episode ' || o.episode_id || ': not delivered'
           WHEN o.attempts < $4 THEN o.error
           ELSE format('attempt %s of %s never finished: the lease of %s ran out (last error: %s)',
                       o.attempts, $4, coalesce(o.lease_owner, 'no node'),
                       coalesce(o.error, 'none')) END
    FROM due
   WHERE o.id = due.id AND o.status = 'pending' AND o.next_attempt_at <= now()
  RETURNING o.*`;

/**
 * How a converging episode's row of type `type` is first written (its end's insert, or a reclaim):
 * a type this node delivers (`hosted`, a text[] reference) is leased to `owner` for `leaseMs` with
 * its first attempt counted, so no peer's rescue delivers it meanwhile; any other is due at once
 * for the nodes that host it. SQL expressions for `attempts`, `lease_owner` and `next_attempt_at`.
 */
export function firstLease(refs: {
  type: string;
  hosted: string;
  owner: string;
  leaseMs: string;
}): [string, string, string] {
  const hosted = `${refs.type} = ANY(${refs.hosted})`;
  return [
    `(${hosted})::int`,
    `CASE WHEN ${hosted} THEN ${refs.owner} END`,
    `CASE WHEN ${hosted} THEN ${after(refs.leaseMs)} ELSE now() END`,
  ];
}

/**
 * Proposals of an ended episode whose keys were already taken, as OutputStore.reclaim takes them.
 */
export interface LostProposals {
  types: string[];
  keys: string[];
  /** JSON text. */
  payloads: string[];
  /**
   * The types this node delivers: their rows are leased to `owner` for `leaseMs`, as an end leases
   * them.
   */
  hosted: readonly string[];
  owner: string;
  leaseMs: number;
}

/**
 * The statements on `cyclium_outputs` after the insert (which rides the post-converge statement,
 * see Outputs): taking due rows, and ending an attempt. An attempt's end is fenced by its number
 * (every take counts one), so a holder whose lease ran out and whose row another node took writes
 * nothing; a failure is also fenced by the owner, so an attempt the drain released writes nothing.
 */
@Injectable()
export class OutputStore {
  constructor(private readonly database: CycliumDataSource) {}

  /** One episode's outputs, in the order its end wrote them. */
  async forEpisode(episodeId: string): Promise<CycliumOutput[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_outputs WHERE episode_id = $1 ORDER BY inserted_at, dedupe_key ` +
        `LIMIT 500`,
      [episodeId],
    );
    return rows.map(toOutput);
  }

  /**
   * True when a row of `types` in the scope of stack `stackRef` and env `envRef` is due; for a
   * statement that runs anyway (the node's beat).
   */
  static dueFragment(typesRef: string, stackRef: string, envRef: string): string {
    return `EXISTS (SELECT 1 FROM cyclium_outputs d WHERE ${DUE('d', typesRef, stackRef, envRef)})`;
  }

  /**
   * Takes over, for episode `episodeId` (which has ended), the rows under `keys` that no episode's
   * end wrote, with this episode's proposals, leased as its end would have leased them. The rows
   * are locked first and judged in a second statement, whose snapshot sees every end that
   * committed before the lock was granted: an owned row is never taken, however close the race.
   */
  async reclaim(episodeId: string, lost: LostProposals): Promise<CycliumOutput[]> {
    return this.database.transaction(async (client) => {
      await client.query(
        `SELECT 1 FROM cyclium_outputs WHERE dedupe_key = ANY($1::text[]) ORDER BY dedupe_key ` +
          `FOR UPDATE`,
        [lost.keys],
      );
      const [attempts, leaseOwner, nextAttemptAt] = firstLease({
        type: 'p.type',
        hosted: '$5::text[]',
        owner: '$6::text',
        leaseMs: '$7',
      });
      const { rows } = await client.query(
        `UPDATE cyclium_outputs o
            SET episode_id = e.id, type = p.type, payload = p.payload, status = 'pending',
                error = NULL, delivered_ref = NULL, delivered_at = NULL,
                attempts = ${attempts}, lease_owner = ${leaseOwner},
                next_attempt_at = ${nextAttemptAt},
                inserted_at = e.finished_at, source_stack = e.source_stack,
                source_env = e.source_env
           FROM unnest($2::text[], $3::text[], $4::jsonb[]) AS p (type, dedupe_key, payload),
                cyclium_episodes e
          WHERE e.id = $1 AND e.finished_at IS NOT NULL AND o.dedupe_key = p.dedupe_key
            AND NOT ${OWNED_OUTPUT('o')}
         RETURNING o.*`,
        [episodeId, lost.types, lost.keys, lost.payloads, lost.hosted, lost.owner, lost.leaseMs],
      );
      return rows.map(toOutput);
    });
  }

  /**
   * Taken rows (status `pending`, leased to `owner`) and rows that ran out of attempts (status
   * `failed`), of the scope `scope` (the taking node's).
   */
  async take(
    owner: string,
    types: readonly string[],
    limit: number,
    maxAttempts: number,
    leaseMs: number,
    scope: { stack: string | null; env: string | null },
  ): Promise<CycliumOutput[]> {
    const values = [owner, types, limit, maxAttempts, leaseMs, scope.stack, scope.env];
    const { rows } = await this.database.sql.query(TAKE_DUE, values);
    return rows.map(toOutput);
  }

  async delivered(id: string, attempt: number, ref: unknown): Promise<boolean> {
    const { rowCount } = await this.database.sql.query(
      `UPDATE cyclium_outputs
          SET status = 'delivered', delivered_ref = $3, delivered_at = now(), error = NULL,
              lease_owner = NULL
        WHERE id = $1 AND status = 'pending' AND attempts = $2`,
      [id, attempt, JSON.stringify(ref ?? null)],
    );
    return rowCount === 1;
  }

  /** Due again `delayMs` from now (the database's), or `failed` when `delayMs` is null. */
  async failed(
    id: string,
    attempt: number,
    owner: string,
    reason: string,
    delayMs: number | null,
  ): Promise<boolean> {
    const { rowCount } = await this.database.sql.query(
      `UPDATE cyclium_outputs
          SET status = CASE WHEN $5::double precision IS NULL THEN 'failed' ELSE 'pending' END,
              next_attempt_at = coalesce(${after('$5')}, next_attempt_at),
              error = $4, lease_owner = NULL
        WHERE id = $1 AND status = 'pending' AND attempts = $2 AND lease_owner = $3`,
      [id, attempt, owner, reason, delayMs],
    );
    return rowCount === 1;
  }

  /**
   * Hands `owner`'s pending rows (all of them, or those of `ids`) back at once, the interrupted
   * attempt not counted: a drain does this so a peer need not wait for the leases to run out.
   */
  async release(owner: string, ids?: readonly string[]): Promise<number> {
    const { rowCount } = await this.database.sql.query(
      `UPDATE cyclium_outputs
        SET lease_owner = NULL, next_attempt_at = now(), attempts = greatest(attempts - 1, 0)
        WHERE status = 'pending' AND lease_owner = $1
          AND ($2::uuid[] IS NULL OR id = ANY($2::uuid[]))`,
      [owner, ids ?? null],
    );
    return rowCount ?? 0;
  }
}
