/**
 * The episode statements of the testing kit's clock (`@cyclium/nestjs/testing`); production code
 * never runs them.
 */

/**
 * The clock moved `$1` ms ahead: every waiting episode's deadline comes that much sooner, in the
 * ISO form the wait wrote it (its wake-up request moves with the other requests).
 */
export const BRING_DEADLINES_FORWARD = `
  UPDATE cyclium_episodes
     SET waiting_for = jsonb_set(waiting_for, '{deadline}', to_jsonb(to_char(
           ((waiting_for ->> 'deadline')::timestamptz - $1 * interval '1 millisecond')
             AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
   WHERE status = 'waiting' AND waiting_for ->> 'deadline' IS NOT NULL`;

/** Episodes that are running or could start without a wake-up: work not yet idle. */
export const UNSETTLED_COUNT = `
  SELECT count(*)::int AS unsettled FROM cyclium_episodes
   WHERE status IN ('running', 'queued', 'throttled')`;
