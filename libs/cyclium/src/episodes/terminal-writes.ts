import type { EpisodeStatus } from '../entities/episode.entity.js';

/** How a run ended, as its terminal write records it. */
export interface TerminalOutcome {
  status: EpisodeStatus;
  summary?: string | null;
  classification?: unknown;
  errorClass?: string | null;
  detail?: string | null;
}

/** What the claim records of a run that failed; null when it converged or was canceled. */
export function claimFailureOf(terminal: TerminalOutcome): string | null {
  return terminal.status === 'failed' ? `${terminal.errorClass}: ${terminal.detail}` : null;
}

/**
 * The one terminal write of cyclium_episodes, for one run or many: every row of the CTE `input`
 * (columns `episode_id`, `status`, `summary`, `classification`, `error_class`, `error_detail`)
 * whose episode is still running gets its outcome — `done` or `partially_failed` with its summary,
 * `failed` or `canceled` with its error — as CTEs, the last named `ep` (`RETURNING id`). `input`
 * holds only the rows whose ownership was proven at their fence: no row, no write. The rows are
 * locked in id order first, as the drain's stamp locks them, so a batch and a stamp wait for each
 * other instead of deadlocking.
 */
export function finishEpisodes(input: string): Array<[string, string]> {
  return [
    [
      'ep_locked',
      `SELECT e.id FROM cyclium_episodes e JOIN ${input} i ON i.episode_id = e.id
        WHERE e.status = 'running' ORDER BY e.id FOR UPDATE OF e`,
    ],
    [
      'ep',
      `UPDATE cyclium_episodes e
          SET status = i.status, summary = coalesce(i.summary, e.summary), classification = coalesce(i.classification, e.classification),
              error_class = i.error_class, error_detail = i.error_detail, phase = NULL, finished_at = now(), updated_at = now()
         FROM ep_locked l JOIN ${input} i ON i.episode_id = l.id
        WHERE e.id = l.id
       RETURNING e.id`,
    ],
  ];
}
