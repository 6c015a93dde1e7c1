// The operations page's versions: the versions that episodes in flight are pinned to, whether a
// live node runs each, and the move of one version's episodes to another. Kept out of app.js.
'use strict';

(function () {
  const { $, el, loadFailed } = globalThis.CycliumPageKit;

  /** `page`: the API client and the page's refresh. */
  function create(page) {
    const { api } = page;

    /**
     * Moves one version's episodes to another after the operator confirms (Episodes.moveVersion);
     * the answer stays below the table, which the next refresh redraws.
     */
    async function moveVersion(v) {
      const result = $('versions-result');
      const to = globalThis.prompt(
        `Move the episodes of ${v.actorId}.${v.expectationId} pinned to ${v.version} to version:`,
      );
      if (!to) return;
      const question =
        `Move every episode of ${v.actorId}.${v.expectationId} at ${v.version} that no live ` +
        `node runs now to ${to}? Code at ${to} will replay their journals.`;
      if (!globalThis.confirm(question)) return;
      try {
        const answer = await api('/api/versions/move', {
          method: 'POST',
          body: { actorId: v.actorId, expectationId: v.expectationId, from: v.version, to },
        });
        result.textContent = `moved ${answer.moved} episode(s) to ${to}`;
        void page.refresh();
      } catch (error) {
        result.textContent = `move refused: ${error.message}`;
      }
    }

    function versionRow(v) {
      const counts = Object.entries(v.counts)
        .map(([status, n]) => `${n} ${status}`)
        .join(', ');
      return el(
        'tr',
        { 'data-testid': 'version-row', 'data-version': v.version },
        el('td', {}, `${v.actorId}.${v.expectationId}`),
        el('td', {}, el('code', {}, v.version)),
        el('td', {}, counts),
        el(
          'td',
          { 'data-testid': 'version-hosted' },
          v.hosted ? 'a live node runs it' : 'waiting for a node of this version',
        ),
        el(
          'td',
          {},
          el(
            'button',
            { type: 'button', 'data-testid': 'version-move', onclick: () => moveVersion(v) },
            'Move to…',
          ),
        ),
      );
    }

    async function refreshVersions() {
      const box = $('versions');
      try {
        const { items } = await api('/api/versions');
        box.replaceChildren(
          items.length
            ? el(
                'table',
                { 'data-testid': 'versions-table' },
                el(
                  'tr',
                  {},
                  ...['expectation', 'version', 'in flight', 'nodes', ''].map((h) =>
                    el('th', {}, h),
                  ),
                ),
                ...items.map(versionRow),
              )
            : el('p', { class: 'muted' }, 'no episode in flight is pinned to a version'),
        );
      } catch (error) {
        box.replaceChildren(loadFailed(error));
      }
    }

    return { refresh: refreshVersions };
  }

  globalThis.CycliumVersions = Object.freeze({ create });
})();
