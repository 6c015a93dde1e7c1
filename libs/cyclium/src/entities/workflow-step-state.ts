/**
 * A step of an instance, as `step_states` keeps it: `waiting` for its dependencies, `running` an
 * episode (the current attempt's), or finished — `done`, `failed` (its policy decided what the
 * instance did next) or `canceled` (the instance ended before it could finish).
 */
export type StepStatus = 'waiting' | 'running' | 'done' | 'failed' | 'canceled';

/** How a step's episode ended, as the steps after it see it. */
export interface StepResult {
  status: 'done' | 'partially_failed' | 'failed' | 'canceled';
  episodeId: string | null;
  summary: string | null;
  /** The episode's classification; stored by reference (loaded from the episode) when large. */
  classification: unknown;
  /** `error_class: detail` of a failed step. */
  error: string | null;
}

/** One step's progress inside a workflow instance's state. */
export interface StepState {
  status: StepStatus;
  /** Episodes started for this step so far. */
  attempts: number;
  episodeId: string | null;
  /** Set once the step finished; `classification` left out when `classificationRef`. */
  result: StepResult | null;
  /** True when the classification was too large to keep here: read it from the episode. */
  classificationRef?: true;
  error: string | null;
}
