// A stacked bar chart drawn as SVG from script, for the operations page: no charting library, so the
// page still ships as plain files that work offline under its Content-Security-Policy. Colours come
// from classes in app.css (a style attribute would be refused); data goes in as text nodes only.
'use strict';

(function () {
  const { svg } = globalThis.CycliumSvg;
  const WIDTH = 760;
  const HEIGHT = 190;
  // Room for the axis labels on the left and below, and for the legend above.
  const PAD = { left: 34, right: 8, top: 24, bottom: 22 };

  /** The top of the value axis: the largest stack, rounded up to a number that halves evenly. */
  function axisTop(largest) {
    if (largest <= 2) return 2;
    const step = 10 ** Math.floor(Math.log10(largest));
    const top = Math.ceil(largest / step) * step;
    return top % 2 === 0 ? top : top + step;
  }

  /**
   * `spec.series`: [{ key, label, className }] stacked bottom-up; `spec.points`: [{ label, values:
   * { [key]: number }, title, attrs }], one bar each, drawn left to right; `attrs` go on the bar's
   * group. `spec.labelEvery`: every how many points the label axis is labelled (and the last).
   */
  function bars(spec) {
    const { series, points } = spec;
    const totals = points.map((p) => series.reduce((sum, s) => sum + (p.values[s.key] || 0), 0));
    const top = axisTop(Math.max(0, ...totals));
    const plotW = WIDTH - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const slot = plotW / Math.max(points.length, 1);
    const barW = Math.max(slot * 0.8, 1);
    const y = (value) => PAD.top + plotH - (value / top) * plotH;
    const chart = svg('svg', {
      class: 'chart',
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      role: 'img',
      'aria-label': spec.label,
      'data-testid': spec.testid,
    });

    // The value axis: gridlines at 0, half and the top.
    for (const value of [0, top / 2, top]) {
      chart.append(
        svg('line', {
          class: 'grid',
          x1: PAD.left,
          x2: WIDTH - PAD.right,
          y1: y(value),
          y2: y(value),
        }),
        svg(
          'text',
          { class: 'axis', x: PAD.left - 4, y: y(value) + 4, 'text-anchor': 'end' },
          String(value),
        ),
      );
    }

    points.forEach((point, i) => {
      const x = PAD.left + i * slot + (slot - barW) / 2;
      // A full-height, invisible rectangle: hovering an empty minute still shows its title.
      const group = svg(
        'g',
        { class: 'bar', ...point.attrs },
        svg('title', {}, point.title),
        svg('rect', { class: 'hit', x, y: PAD.top, width: barW, height: plotH }),
      );
      let base = 0;
      for (const s of series) {
        const value = point.values[s.key] || 0;
        if (value === 0) continue;
        group.append(
          svg('rect', {
            class: s.className,
            x,
            y: y(base + value),
            width: barW,
            height: y(base) - y(base + value),
          }),
        );
        base += value;
      }
      chart.append(group);
      const every = spec.labelEvery || 1;
      const last = i === points.length - 1;
      // The last bar is always labelled (ending at its bar, not cut off at the right edge); a
      // regular label too close to it is left out rather than overlap it.
      if (last || (i % every === 0 && points.length - 1 - i >= every / 2))
        chart.append(
          svg(
            'text',
            {
              class: 'axis',
              x: last ? x + barW : x + barW / 2,
              y: HEIGHT - 6,
              'text-anchor': last ? 'end' : 'middle',
            },
            point.label,
          ),
        );
    });

    // The legend above the plot, left to right: a swatch and a name per series. Text widths are
    // estimated (the chart is not in the document yet, so nothing can be measured).
    let x = PAD.left;
    for (const s of series) {
      chart.append(
        svg('rect', { class: s.className, x, y: 3, width: 10, height: 10 }),
        svg('text', { class: 'legend', x: x + 14, y: 12 }, s.label),
      );
      x += 14 + s.label.length * 6.5 + 16;
    }
    return chart;
  }

  const hhmm = (iso) =>
    new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });

  /**
   * `GET /api/history`'s buckets as a chart: done, failed (partially failed counted with it, as
   * both need a look) and canceled, stacked per minute, the minute under way on the right.
   */
  function finishedPerMinute(buckets) {
    const points = buckets.map((b) => {
      const failed = b.failed + b.partiallyFailed;
      return {
        label: hhmm(b.minute),
        values: { done: b.done, failed, canceled: b.canceled },
        title:
          `${hhmm(b.minute)}: ${b.done} done, ${b.failed} failed, ` +
          `${b.partiallyFailed} partially failed, ${b.canceled} canceled`,
        attrs: {
          'data-testid': 'history-bar',
          'data-minute': b.minute,
          'data-done': b.done,
          'data-failed': failed,
          'data-canceled': b.canceled,
        },
      };
    });
    return bars({
      label: `episodes finished per minute, last ${buckets.length} min`,
      testid: 'history-chart',
      series: [
        { key: 'done', label: 'done', className: 'done' },
        { key: 'failed', label: 'failed', className: 'failed' },
        { key: 'canceled', label: 'canceled', className: 'canceled' },
      ],
      points,
      labelEvery: Math.max(Math.ceil(points.length / 6), 1),
    });
  }

  globalThis.CycliumCharts = Object.freeze({ bars, finishedPerMinute });
})();
