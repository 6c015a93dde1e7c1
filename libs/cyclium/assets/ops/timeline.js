// An episode's timeline for the operations page: its journal on one time axis, as SVG built
// element by element (no markup parsed, no inline style: the page's Content-Security-Policy holds).
'use strict';

(function () {
  const { svg } = globalThis.CycliumSvg;
  const WIDTH = 1000;
  const LEFT = 8;
  const RIGHT = 8;
  const STEP_Y = 26;
  const STEP_H = 16;
  const MARK_Y = 50;
  // Marker labels take the first of three rows where they do not run into the last one there.
  const LABEL_ROWS = 3;
  const LABEL_ROW_H = 12;
  const CHAR_W = 6.5;
  const HEIGHT = MARK_Y + LABEL_ROWS * LABEL_ROW_H + 26;
  // Journal rows that mark a moment rather than a step's work: why the run stopped or went on.
  const WAITS_START = ['retry', 'sleep', 'interrupted', 'orphaned'];

  const title = (text) => svg('title', {}, document.createTextNode(text));
  const ms = (iso) => (iso ? Date.parse(iso) : NaN);

  function span(ms0) {
    const s = Math.round(ms0 / 100) / 10;
    return s < 60 ? `${s} s` : `${Math.round(s / 6) / 10} min`;
  }

  /** Where a marker says the run went on: the node in its result (`woken`, `resumed`), if any. */
  const nodeOf = (row) =>
    row.resultRef && typeof row.resultRef === 'object' ? row.resultRef.node || null : null;

  /**
   * The timeline of `episode` with its journal `steps`: step bars (work, from the end the journal
   * records back by its duration), markers for retries, sleeps, wake-ups and takeovers (with the
   * node that went on, when the marker names it), shaded waits between a retry or sleep and the
   * wake-up after it, and the end. Returns an <svg>.
   */
  function render(episode, steps) {
    const start = Math.min(
      ...[episode.queuedAt, episode.startedAt, steps[0] && steps[0].createdAt]
        .map(ms)
        .filter(Number.isFinite),
    );
    const end = Math.max(
      ms(episode.finishedAt) || Date.now(),
      ...steps.map((s) => ms(s.createdAt)).filter(Number.isFinite),
    );
    const total = Math.max(end - start, 1);
    const x = (t) => LEFT + ((t - start) / total) * (WIDTH - LEFT - RIGHT);
    const parts = [
      svg('line', { class: 'axis', x1: LEFT, x2: WIDTH - RIGHT, y1: HEIGHT - 18, y2: HEIGHT - 18 }),
      svg(
        'text',
        { class: 'tick', x: LEFT, y: HEIGHT - 4 },
        document.createTextNode(new Date(start).toLocaleTimeString()),
      ),
      svg(
        'text',
        { class: 'tick', x: WIDTH - RIGHT, y: HEIGHT - 4, 'text-anchor': 'end' },
        document.createTextNode(`+${span(total)}`),
      ),
    ];
    let waitFrom = null;
    const rowEnds = new Array(LABEL_ROWS).fill(-Infinity);
    /** The label row for text at `at`, or -1 when every row is taken there (the title says it). */
    const labelRow = (left, text) => {
      const row = rowEnds.findIndex((end) => end < left);
      if (row >= 0) rowEnds[row] = left + text.length * CHAR_W + 6;
      return row;
    };
    for (const s of steps) {
      const at = ms(s.createdAt);
      if (!Number.isFinite(at)) continue;
      const marker = s.kind === 'observation' || s.kind === 'sleep';
      if (!marker) {
        const from = at - (Number(s.durationMs) || 0);
        parts.push(
          svg(
            'rect',
            {
              class: 'step',
              'data-testid': 'timeline-step',
              'data-name': s.name,
              x: x(from),
              y: STEP_Y,
              width: Math.max(x(at) - x(from), 2),
              height: STEP_H,
            },
            title(`#${s.stepNo} ${s.kind} ${s.name}: ${s.durationMs ?? 0} ms`),
          ),
        );
        continue;
      }
      if (s.name === 'woken' && waitFrom !== null) {
        parts.push(
          svg('rect', {
            class: 'wait',
            'data-testid': 'timeline-wait',
            x: x(waitFrom),
            y: STEP_Y - 4,
            width: Math.max(x(at) - x(waitFrom), 1),
            height: STEP_H + 8,
          }),
        );
        waitFrom = null;
      }
      if (WAITS_START.includes(s.name) || s.kind === 'sleep') waitFrom = at;
      const node = nodeOf(s);
      const label = node ? `${s.name} · ${node}` : s.name;
      const row = labelRow(x(at), label);
      const y = MARK_Y + (row + 1) * LABEL_ROW_H - 2;
      parts.push(
        svg(
          'g',
          { 'data-testid': 'timeline-mark', 'data-name': s.name, class: `mark mark-${s.name}` },
          svg('line', { x1: x(at), x2: x(at), y1: STEP_Y - 6, y2: row >= 0 ? y - 9 : MARK_Y }),
          row < 0
            ? null
            : x(at) + label.length * CHAR_W > WIDTH - RIGHT
              ? svg('text', { x: x(at) - 2, y, 'text-anchor': 'end' }, label)
              : svg('text', { x: x(at) + 2, y }, label),
          title(`${s.name} at ${s.createdAt}${node ? ` on ${node}` : ''}`),
        ),
      );
    }
    if (episode.finishedAt) {
      const at = ms(episode.finishedAt);
      parts.push(
        svg(
          'g',
          {
            'data-testid': 'timeline-end',
            'data-status': episode.status,
            class: `end end-${episode.status}`,
          },
          svg('line', { x1: x(at), x2: x(at), y1: 4, y2: HEIGHT - 18 }),
          svg(
            'text',
            { x: x(at) - 2, y: 14, 'text-anchor': 'end' },
            document.createTextNode(episode.status),
          ),
        ),
      );
    }
    return svg(
      'svg',
      {
        'data-testid': 'episode-timeline',
        class: 'timeline',
        viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
        role: 'img',
        'aria-label': `timeline of episode ${episode.id}`,
      },
      ...parts,
    );
  }

  globalThis.CycliumTimeline = { render };
})();
