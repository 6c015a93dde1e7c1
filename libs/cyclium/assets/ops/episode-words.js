// What the parts of the operations page say alike of an episode: which statuses an action applies
// to, what it waits for, how it was triggered, the step a failure came from, and what its node's
// health means.
'use strict';

(function () {
  const { el, time } = globalThis.CycliumPageKit;

  const ENDED = ['done', 'partially_failed', 'failed', 'canceled'];
  const CANCELLABLE = ['queued', 'throttled', 'deferred', 'waiting', 'running', 'blocked'];
  const RETRYABLE = ['failed', 'partially_failed'];
  const WAITS_FOR = {
    start: 'runs later',
    retry: 'retry backoff',
    sleep: 'sleeping',
    resume: 'resumes',
    wait: 'waiting',
  };

  /** A node's health, as the cluster table and a run of that node say it. */
  const HEALTH_SAYS = {
    live: 'beats on time',
    suspect: 'its beat is late: it may have died; its runs are marked until it beats or is stale',
    stale: 'no beat for two intervals: recovery takes its work over',
  };

  /** A wait (`ep.waitForSignal`, `waitForEvent`, `waitForChildren`) in a few words. */
  function describeWait(w) {
    if (w.kind === 'signal') return `signal "${w.name}"`;
    if (w.kind === 'event') {
      const match = Object.keys(w.match || {}).length ? ` ${JSON.stringify(w.match)}` : '';
      return `event ${w.type}${match}`;
    }
    const children = w.children || [];
    const live = children.filter((c) => typeof c === 'object' && !ENDED.includes(c.status));
    return `${children.length} children${typeof children[0] === 'object' ? `, ${live.length} live` : ''}`;
  }

  /** What a deferred, waiting or throttled episode waits for, and when it falls due. */
  const waits = (e) =>
    e.wait
      ? el(
          'span',
          { class: 'muted small', 'data-testid': 'episode-wait' },
          `waits for ${describeWait(e.wait)}, `,
          e.wait.deadline ? ['until ', time(e.wait.deadline)] : 'no deadline',
        )
      : e.waitingFor
        ? el(
            'span',
            { class: 'muted small', 'data-testid': 'episode-due' },
            `${WAITS_FOR[e.waitingFor] || e.waitingFor}, due `,
            time(e.dueAt),
          )
        : e.status === 'throttled'
          ? el(
              'span',
              { class: 'muted small', 'data-testid': 'episode-throttled' },
              `waits for its limits${e.flowKey ? ` (key ${e.flowKey})` : ''}`,
            )
          : '';

  const ref = (e) => e.triggerRef || {};
  const trigger = (e) =>
    [e.triggerType, ref(e).eventType, ref(e).scheduledAt].filter(Boolean).join(' ');

  /**
   * The step a failed episode threw in, read from the head of its error detail (`[attempt n of m:
   * ]in step 3 "charge": ...`, written by the library); null when it failed between steps.
   */
  function failedStep(e) {
    if (!['failed', 'partially_failed'].includes(e.status) || !e.errorDetail) return null;
    const found =
      /^(?:attempt \d+ of \d+: )?in (step|transaction) (\d+) "((?:[^"\\]|\\.)*)": (.*)/s.exec(
        e.errorDetail,
      );
    if (!found) return null;
    const [, kind, stepNo, name, error] = found;
    return { kind, stepNo: Number(stepNo), name, error, text: `${kind} ${stepNo} "${name}"` };
  }

  globalThis.CycliumEpisodeWords = Object.freeze({
    ENDED,
    CANCELLABLE,
    RETRYABLE,
    HEALTH_SAYS,
    waits,
    ref,
    trigger,
    failedStep,
  });
})();
