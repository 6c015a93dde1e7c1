import { KEYED_RUNNING } from '../sql/keyed-status.js';

/**
 * With claims outside the statement (claims off, or an adapter whose store is elsewhere), the
 * episode row is what a run's write proves it still owns: running, this node its owner, and not
 * taken by a sweep (phase `recovering`, by this node's sweep too). A predicate over the episode
 * aliased `e`, for `owner` (a SQL text expression); a write that meets it false writes nothing, and
 * the run ends as a lost one.
 */
export function runningHere(e: string, owner: string): string {
  return (
    `${e}.status = ${KEYED_RUNNING} AND ${e}.owner_node = ${owner} AND ` +
    `${e}.phase IS DISTINCT FROM 'recovering'`
  );
}
