import type { EpisodeStatus } from '../entities/episode.entity.js';
import { finishedState } from '../claims/claim-sql.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/** How a run ended, as its terminal write records it. */
export interface TerminalOutcome {
  status: EpisodeStatus;
  summary?: string | null;
  classification?: unknown;
  errorClass?: string | null;
  detail?: string | null;
  /** `Convergence.result`, stored for `Episodes.result` and a waiting parent. */
  result?: unknown;
}

/** The result as the terminal write's jsonb parameter: null for none. */
export function resultJsonOf(terminal: TerminalOutcome): string | null {
  return terminal.result === undefined ? null : JSON.stringify(terminal.result);
}

/** What the claim records of a run that failed; null when it converged or was canceled. */
export function claimFailureOf(terminal: TerminalOutcome): string | null {
  return terminal.status === 'failed' ? `${terminal.errorClass}: ${terminal.detail}` : null;
}

/**
 * The terminal write of many runs in one statement (finishEpisode is one run's): every row of the
 * CTE `input` (columns `episode_id`, `status`, `summary`, `classification`, `error_class`,
 * `error_detail`, `result`) whose episode is still running gets its outcome — `done` or
 * `partially_failed` with its summary and result, `failed` or `canceled` with its error — as
 * CTEs, the last named `ep` (`RETURNING id`). `input` holds only the rows whose ownership was
 * proven at their fence: no row, no write; a row whose `step_journal_no` is set (it carries its
 * run's last step) is refused while a cancel is pending or a drain stamped it (carriedStepHeld).
 * The rows are locked in id order first, as the drain's stamp locks them, so a batch and a stamp
 * wait for each other instead of deadlocking. `count`: how many rows `input` holds at most.
 * `rowClaims`: `input`'s `owner`, `fence` and `failure` are the claims the statement finishes,
 * which the rows hold too (OutcomeRefs.claim).
 */
export function finishEpisodes(
  input: string,
  count: string,
  rowClaims = false,
): Array<[string, string]> {
  return [
    [
      'ep_locked',
      // The bound removes no row (see batchRows): planned for one, the batch drives the join.
      `SELECT e.id FROM cyclium_episodes e
         JOIN (SELECT * FROM ${input} LIMIT ${count}) i ON i.episode_id = e.id
        WHERE e.status = ${KEYED_RUNNING}
          AND (i.step_journal_no IS NULL OR (${carriedStepHeld('e')}))
        ORDER BY e.id FOR UPDATE OF e`,
    ],
    [
      'ep',
      `UPDATE cyclium_episodes e
          SET ${terminalSet({
            status: 'i.status',
            summary: 'i.summary',
            classification: 'i.classification',
            errorClass: 'i.error_class',
            detail: 'i.error_detail',
            result: 'i.result',
            claim: rowClaims
              ? { owner: 'i.owner', fence: 'i.fence', state: finishedState('i.failure') }
              : undefined,
          })}
         FROM ep_locked l JOIN ${input} i ON i.episode_id = l.id
        WHERE e.id = l.id
       RETURNING e.id`,
    ],
  ];
}

/**
 * SQL expressions for an outcome's columns: parameters of a lone write, or an input row's columns.
 */
export interface OutcomeRefs {
  status: string;
  summary: string;
  classification: string;
  errorClass: string;
  detail: string;
  result: string;
  /**
   * The claim the same statement finishes, when the row holds it (ClaimFragments.episodeRows):
   * the row takes its finished state while it holds that generation. A claim held in the row
   * alone finishes there; one the claim table holds finishes there too, and the database's mirror
   * of it finds the row already equal.
   */
  claim?: { owner: string; fence: string; state: string };
}

/**
 * The SET list of every terminal write of cyclium_episodes (aliased `e`): one spelling for one run
 * or many.
 */
function terminalSet(v: OutcomeRefs): string {
  return `status = ${v.status}, summary = coalesce(${v.summary}, e.summary),
  classification = coalesce(${v.classification}, e.classification),
              error_class = ${v.errorClass}, error_detail = ${v.detail}, phase = NULL,
              result = ${v.result},
              finished_at = now(), updated_at = now()${
                v.claim === undefined
                  ? ''
                  : `, claim_state = CASE WHEN e.claim_owner = ${v.claim.owner} AND ` +
                    `e.claim_fence = ${v.claim.fence} THEN ${v.claim.state} ELSE e.claim_state END`
              }`;
}

/**
 * The terminal write of one run, as the CTE `ep` (`RETURNING id`), joined to the CTE `owner`: no
 * row, no write. Its own row is the only one it locks, so it needs no lock order; and it plans as
 * one row by key, where finishEpisodes' joins over an input plan for many. `held`, a predicate over
 * the row `e`, is what proves ownership when no claim in the statement does (runningHere): in the
 * UPDATE's own condition, so it is checked again on the row as it is once locked, after a sweep
 * that took it meanwhile.
 */
export function finishEpisode(id: string, outcome: OutcomeRefs, held?: string): string {
  return `
      UPDATE cyclium_episodes e
         SET ${terminalSet(outcome)}
        FROM owner
       WHERE e.id = ${id} AND e.status = ${KEYED_RUNNING}${held === undefined ? '' : ` AND ${held}`}
      RETURNING e.id`;
}

/**
 * What an end carrying its run's last step also needs of the row `e` (see EndOutcome): no cancel
 * pending, and no drain's stamp (its marker takes the next journal position, and the run must
 * write nothing more), as the step's own write would have been refused.
 */
export function carriedStepHeld(e: string): string {
  return `${e}.cancel_requested_at IS NULL AND ${e}.phase IS DISTINCT FROM 'interrupted'`;
}
