// A workflow instance's steps as a graph, drawn as SVG from script for the operations page: a box per
// step of the workflow's definition, coloured by its status (classes in app.css: a style attribute
// would be refused), and an arrow from each step to each step that waits for it. Step names reach
// the DOM as text nodes only.
'use strict';

(function () {
  const { svg } = globalThis.CycliumSvg;
  const BOX = { width: 170, height: 46 };
  const GAP = { x: 56, y: 16 };
  const PAD = 8;
  // Longer names are cut in the box; the whole name is in its hover title.
  const NAME_MAX = 22;

  const cut = (text) => (text.length > NAME_MAX ? `${text.slice(0, NAME_MAX - 1)}…` : text);

  /**
   * Columns by depth (a step one column right of the deepest step it waits for), so every arrow
   * points right; within a column, the declaration order. A dependency the definition does not
   * hold is left out of the depth (the server checked the definition; this only keeps it finite).
   */
  function layout(steps) {
    const byId = new Map(steps.map((s) => [s.id, s]));
    const depth = new Map();
    const depthOf = (id, seen) => {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id)) return 0;
      seen.add(id);
      const after = (byId.get(id).after || []).filter((d) => byId.has(d));
      const d = after.length ? 1 + Math.max(...after.map((a) => depthOf(a, seen))) : 0;
      depth.set(id, d);
      return d;
    };
    const rows = [];
    const at = new Map();
    for (const step of steps) {
      const column = depthOf(step.id, new Set());
      const row = (rows[column] = (rows[column] || 0) + 1) - 1;
      at.set(step.id, {
        x: PAD + column * (BOX.width + GAP.x),
        y: PAD + row * (BOX.height + GAP.y),
      });
    }
    const columns = rows.length;
    const tallest = Math.max(1, ...rows.filter(Boolean));
    return {
      at,
      width: PAD * 2 + columns * BOX.width + Math.max(columns - 1, 0) * GAP.x,
      height: PAD * 2 + tallest * BOX.height + (tallest - 1) * GAP.y,
    };
  }

  /** What the hover title says of a step: its actor, attempts, episode and error. */
  function describe(step, state) {
    return [
      `${step.id}: ${state ? state.status : 'not in this instance'}`,
      step.actorId ? `runs ${step.actorId} / ${step.expectationId}` : null,
      step.after && step.after.length ? `after ${step.after.join(', ')}` : null,
      state && state.attempts > 1 ? `attempt ${state.attempts}` : null,
      state && state.episodeId ? `episode ${state.episodeId} (click to open)` : null,
      state && state.error ? `error: ${state.error}` : null,
    ]
      .filter(Boolean)
      .join('\n');
  }

  /**
   * `steps`: [{ id, actorId, expectationId, after }] in declaration order; `states`: the instance's
   * step states by step id; `onStep(episodeId)`: called when a box whose step has an episode is
   * clicked (or Enter is pressed on it).
   */
  function draw(steps, states, onStep) {
    const { at, width, height } = layout(steps);
    const graph = svg('svg', {
      class: 'workflow-graph',
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: 'img',
      'aria-label': `workflow steps: ${steps.map((s) => s.id).join(', ')}`,
      'data-testid': 'workflow-graph',
    });
    graph.append(
      svg(
        'defs',
        {},
        svg(
          'marker',
          {
            id: 'workflow-arrow',
            viewBox: '0 0 10 10',
            refX: 10,
            refY: 5,
            markerWidth: 7,
            markerHeight: 7,
            orient: 'auto-start-reverse',
          },
          svg('path', { d: 'M 0 0 L 10 5 L 0 10 z' }),
        ),
      ),
    );
    // Arrows first, so the boxes sit on top of their ends.
    for (const step of steps) {
      const to = at.get(step.id);
      for (const dependency of step.after || []) {
        const from = at.get(dependency);
        if (!from) continue;
        const [x1, y1] = [from.x + BOX.width, from.y + BOX.height / 2];
        const [x2, y2] = [to.x, to.y + BOX.height / 2];
        const bend = (x2 - x1) / 2;
        graph.append(
          svg('path', {
            class: 'edge',
            d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
            'marker-end': 'url(#workflow-arrow)',
            'data-testid': 'workflow-edge',
            'data-from': dependency,
            'data-to': step.id,
          }),
        );
      }
    }
    for (const step of steps) {
      const { x, y } = at.get(step.id);
      const state = states[step.id];
      const status = state ? state.status : 'unknown';
      const episodeId = state && state.episodeId;
      const attempt = state && state.attempts > 1 ? ` · try ${state.attempts}` : '';
      const box = svg(
        'g',
        {
          class: `wf-step ${status}${episodeId ? ' opens' : ''}`,
          'data-testid': 'workflow-step',
          'data-step': step.id,
          'data-status': status,
          'data-episode-id': episodeId || undefined,
          tabindex: episodeId ? 0 : undefined,
          role: episodeId ? 'button' : undefined,
        },
        svg('title', {}, describe(step, state)),
        svg('rect', { x, y, width: BOX.width, height: BOX.height, rx: 6 }),
        svg('text', { class: 'name', x: x + 10, y: y + 19 }, cut(step.id)),
        svg('text', { class: 'status', x: x + 10, y: y + 36 }, `${status}${attempt}`),
      );
      if (episodeId) {
        box.addEventListener('click', () => onStep(episodeId));
        box.addEventListener('keydown', (event) => event.key === 'Enter' && onStep(episodeId));
      }
      graph.append(box);
    }
    return graph;
  }

  globalThis.CycliumWorkflowGraph = Object.freeze({ draw });
})();
