// The operations page's workflow instances: the list, one instance's detail with its step graph
// (workflow-graph.js), and its cancel. Kept out of app.js, which hands over what it owns.
'use strict';

(function () {
  const LIVE = ['running', 'blocked'];

  const { $, el, badge, time, scope, confirmAction, loadFailed } = globalThis.CycliumPageKit;

  /**
   * `page`: the API client, the episode detail a step opens (openEpisode), the banner
   * (showProblem), the page's address (writeUrl) and its refresh.
   */
  function create(page) {
    const { api } = page;
    let selected = null;
    // The detail last drawn, as JSON: an instance that has not moved is not drawn again, so a
    // hover or a focused step survives the refresh loop.
    let drawn = null;
    // The instance whose detail is on screen: Cancel acts on it alone.
    let shown = null;

    const field = (label, value) => [
      el('dt', {}, label),
      el('dd', {}, value === null || value === undefined || value === '' ? '—' : value),
    ];

    /** "1 done, 1 running": the steps of an instance by status. */
    function stepsText(instance) {
      const counts = {};
      for (const s of Object.values(instance.stepStates || {}))
        counts[s.status] = (counts[s.status] || 0) + 1;
      return Object.entries(counts)
        .map(([status, n]) => `${n} ${status}`)
        .join(', ');
    }

    function renderList(items) {
      const box = $('workflows');
      if (!items.length)
        return box.replaceChildren(
          el('p', { class: 'muted', 'data-testid': 'workflows-table' }, 'none'),
        );
      const head = ['Started', 'Workflow', 'Status', 'Subject', 'Steps', 'Stack / env', 'Error'];
      const rows = items.map((w) =>
        el(
          'tr',
          {
            'data-testid': 'workflow-row',
            'data-workflow-id': w.id,
            'data-status': w.status,
            class: selected === w.id ? 'selected' : undefined,
            onclick: () => open(w.id),
          },
          el('td', {}, time(w.insertedAt)),
          el('td', {}, w.workflowId),
          el('td', {}, badge(w.status)),
          el('td', {}, w.subjectValue ?? '—'),
          el('td', {}, stepsText(w)),
          el('td', {}, scope(w.sourceStack, w.sourceEnv)),
          el('td', { class: w.error ? 'error wrap' : 'wrap' }, w.error || ''),
        ),
      );
      box.replaceChildren(
        el(
          'table',
          { class: 'clickable', 'data-testid': 'workflows-table' },
          el('thead', {}, el('tr', {}, ...head.map((h) => el('th', {}, h)))),
          el('tbody', {}, ...rows),
        ),
      );
    }

    function renderDetail(w) {
      shown = w.id;
      $('workflow-cancel-button').disabled = false;
      $('workflow-detail-id').textContent = w.id;
      $('workflow-fields').replaceChildren(
        ...field('workflow', w.workflowId),
        ...field(
          'status',
          el(
            'span',
            { 'data-testid': 'workflow-detail-status', class: `badge ${w.status}` },
            w.status,
          ),
        ),
        ...field('subject', w.subjectValue),
        ...field('stack / env', scope(w.sourceStack, w.sourceEnv)),
        ...field('started', time(w.insertedAt)),
        ...field('finished', w.finishedAt ? time(w.finishedAt) : null),
        ...field('error', w.error ? el('span', { class: 'error' }, w.error) : null),
        ...field(
          'input',
          el('pre', { class: 'payload' }, JSON.stringify(w.input ?? null, null, 2)),
        ),
      );
      $('workflow-cancel-button').hidden = !LIVE.includes(w.status);
      // A workflow this node does not declare: its steps are known, their order is not.
      const steps = w.definition
        ? w.definition.steps
        : Object.keys(w.stepStates || {}).map((id) => ({ id, after: [] }));
      const note = $('workflow-graph-note');
      note.hidden = Boolean(w.definition);
      note.textContent = w.definition
        ? ''
        : `this node does not declare ${w.workflowId}: its steps are shown without their order`;
      $('workflow-graph-box').replaceChildren(
        globalThis.CycliumWorkflowGraph.draw(steps, w.stepStates || {}, page.openEpisode),
      );
    }

    /** An answer for an instance no longer selected (another row was clicked meanwhile) is dropped. */
    function show(id, detail) {
      if (selected !== id) return;
      $('workflow-detail').hidden = false;
      const json = JSON.stringify(detail);
      if (json === drawn) return;
      drawn = json;
      renderDetail(detail);
    }

    function markRows() {
      for (const row of document.querySelectorAll('[data-testid="workflow-row"]'))
        row.classList.toggle('selected', row.dataset.workflowId === selected);
    }

    async function open(id) {
      selected = id;
      drawn = null;
      // Until this instance's detail arrives, the one on screen is another's: its Cancel waits.
      shown = null;
      $('workflow-cancel-button').disabled = true;
      $('workflow-action-result').textContent = '';
      page.writeUrl();
      markRows();
      try {
        show(id, await api(`/api/workflows/${encodeURIComponent(id)}`));
        if (selected === id) $('workflow-detail').scrollIntoView({ block: 'start' });
      } catch (error) {
        if (selected !== id) return;
        if (error.status === 404) error.message = `no workflow instance ${id}`;
        page.showProblem(error);
      }
    }

    function close() {
      selected = null;
      drawn = null;
      shown = null;
      $('workflow-detail').hidden = true;
      markRows();
      page.writeUrl();
    }

    async function cancel() {
      // The instance on screen, not one still loading.
      const id = shown;
      if (!id || id !== selected) return;
      const result = $('workflow-action-result');
      const confirmed = await confirmAction(
        `Cancel workflow instance ${id}? Its waiting steps never start; the episodes of its ` +
          `running steps are canceled.`,
      );
      if (!confirmed) return;
      try {
        const answer = await api(`/api/workflows/${encodeURIComponent(id)}/cancel`, {
          method: 'POST',
          body: confirmed,
        });
        result.textContent = answer.result;
        await page.refresh();
      } catch (error) {
        result.textContent = `cancel refused: ${error.message}`;
      }
    }

    /** The list, and the instance shown; each failure says so in its own place. */
    async function refresh() {
      const id = selected;
      const [list, detail] = await Promise.allSettled([
        api('/api/workflows?limit=20'),
        id ? api(`/api/workflows/${encodeURIComponent(id)}`) : null,
      ]);
      if (list.status === 'fulfilled') renderList(list.value.items);
      else $('workflows').replaceChildren(loadFailed(list.reason));
      if (!id) return;
      if (detail.status === 'fulfilled') show(id, detail.value);
      else if (selected === id)
        $('workflow-action-result').textContent = `could not load: ${detail.reason.message}`;
    }

    function wire() {
      $('workflow-detail-close').addEventListener('click', close);
      $('workflow-cancel-button').addEventListener('click', () => void cancel());
    }

    return { refresh, open, wire, selected: () => selected };
  }

  globalThis.CycliumWorkflows = Object.freeze({ create });
})();
