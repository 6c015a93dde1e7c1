import type { FencedStatement } from '../leases/claims-in-statement.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/**
 * The first statement of a wait's transaction (WaitSteps): proves this node still owns the running
 * episode at its fence and locks its row until the transaction ends, so a signal or a child's end
 * that arrives meanwhile waits for it and then sees what it decided. Answers the wait the row
 * records, whether a cancel is pending, and the database's clock.
 */
export const LOCK_RUNNING: FencedStatement = {
  name: 'episodes_wait_lock',
  body: `
  UPDATE cyclium_episodes SET updated_at = now()
    FROM owner
   WHERE cyclium_episodes.id = $4 AND status = ${KEYED_RUNNING} AND owner_node = $2
     AND phase IS DISTINCT FROM 'recovering'
  RETURNING cyclium_episodes.waiting_for, cyclium_episodes.cancel_requested_at, now() AS db_now`,
};

/** The locked running episode leaves `running` for `waiting`, saying what for ($2). */
export const PARK = `
  UPDATE cyclium_episodes
     SET status = 'waiting', owner_node = NULL, phase = NULL, waiting_for = $2::jsonb,
         updated_at = now()
   WHERE id = $1 AND status = ${KEYED_RUNNING}
  RETURNING *`;

/** A wait that ended: the row no longer says what it waited for. */
export const CLEAR = `
  UPDATE cyclium_episodes SET waiting_for = NULL WHERE id = $1 AND waiting_for IS NOT NULL`;

/** Whether a wait's park committed (its answer lost): waiting, at that journal position. */
export const PARKED = `
  SELECT EXISTS (SELECT 1 FROM cyclium_episodes
                  WHERE id = $1 AND status = 'waiting'
                    AND (waiting_for ->> 'stepNo')::int = $2) AS parked`;

/** Each episode's outcome so far, for a parent's wait on its children. */
export const OUTCOMES = `
  SELECT id, status, result, error_class, error_detail FROM cyclium_episodes
   WHERE id = ANY($1::uuid[])`;
