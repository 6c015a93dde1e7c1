/**
 * `literal` (a status or claim state, such as `'running'`) as a one-row sub-select, for the
 * statements that find their rows by key and then check the row's status or state.
 *
 * Compared with a plain constant, the check lets the planner reach the row through a partial index
 * of that status (cyclium_episodes_unfinished, cyclium_work_claims_live) and test the key there. It
 * does when the statistics say no row has that status (a table analysed while nothing ran: a quiet
 * night, a new database), and a pooled connection keeps that generic plan: every end then read all
 * the episodes running anywhere. With 5,000 running on another node, 1-step episodes one at a time
 * fell from 525 to 223 a second, four at a time from 1,308 to 308, until the next ANALYZE. The
 * sub-select's value is unknown when a plan is made, so no partial index qualifies and the key
 * reads one row whatever the statistics say; PostgreSQL evaluates it once per statement.
 */
export function keyedStatus(literal: `'${string}'`): string {
  return `(SELECT ${literal}::text)`;
}

/** keyedStatus of `running`, the status a run's own writes check. */
export const KEYED_RUNNING = keyedStatus("'running'");

/** keyedStatus of `claimed`, the state a claim's holder's writes check. */
export const KEYED_CLAIMED = keyedStatus("'claimed'");
