/**
 * A bus event stored longer ago than `retention.archiveAfter` (plus its expectation's debounce), by
 * the database clock: the episode it started may have ended and been archived since, freeing its
 * dedupe key, so dispatching it now could run it a second time. It is skipped (logged and counted
 * on its position row) instead.
 */
export class StaleEventError extends Error {
  override readonly name: string = 'StaleEventError';

  constructor(
    readonly ageMs: number,
    readonly windowMs: number,
  ) {
    super(
      `stored ${Math.round(ageMs)} ms ago, longer than retention.archiveAfter and its debounce ` +
        `(${windowMs} ms): ` +
        'not dispatched, as its episode may have run and been archived already',
    );
  }
}
