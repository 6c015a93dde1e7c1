// The operations page's episode list: its filters and find box, keyset pages, rows that hold still
// under the pointer, and the bulk actions on the filtered set. Kept out of app.js, which hands over
// what it owns: the refresh loop, the banner and the page's address.
'use strict';

(function () {
  const { $, el, badge, time, scope, short, fill, query, confirmAction } =
    globalThis.CycliumPageKit;
  const { CANCELLABLE, RETRYABLE, HEALTH_SAYS, waits, trigger } = globalThis.CycliumEpisodeWords;

  // The filters live in the page's address too, so a link shows the same list.
  const URL_FILTERS = ['actor', 'status', 'stack', 'env', 'eventId', 'dedupeKey'];
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  // `?pageSize=` in the page's address, for a long table or a short one (the API allows 1 to 100).
  const PAGE_SIZE = Math.min(
    Math.max(Number(new URLSearchParams(location.search).get('pageSize')) || 25, 1),
    100,
  );
  const BULK_LIMIT = 100;

  /**
   * `page`: the API client, the episode detail (open, selected), each node's health from the last
   * cluster read (nodeHealth), the banner (clearProblem), the page's address (writeUrl) and its
   * refresh.
   */
  function create(page) {
    const { api, detail } = page;
    let filters = {};
    // Keyset paging: the cursor of each page shown so far; the last one is the page on screen.
    let cursors = [null];
    let nextCursor = null;
    // Under the pointer the rows hold still (a click must land on the row it aimed at): the page
    // that arrived meanwhile waits in `held`.
    let hovering = false;
    let held = null;
    let drawn = false;

    /**
     * Which attempt of its retry policy a started episode is on ("3 of 3"); crash recoveries, when
     * any, after a plus.
     */
    function attemptText(e) {
      if (!e.startedAt) return '—';
      const attempt = (e.retries || 0) + 1;
      const of = e.retryAttempts ? ` of ${e.retryAttempts}` : '';
      return `${attempt}${of}${e.attempts ? ` +${e.attempts} recovered` : ''}`;
    }

    /** A run whose node has gone quiet: the row says so before recovery takes it over. */
    function ownerHealth(e) {
      const health = e.status === 'running' && page.nodeHealth(e.ownerNode);
      if (!health || health === 'live') return null;
      return [
        ' ',
        el(
          'span',
          { class: `badge ${health}`, 'data-testid': 'owner-health', title: HEALTH_SAYS[health] },
          `node ${health}`,
        ),
      ];
    }

    function row(e) {
      return el(
        'tr',
        {
          'data-testid': 'episode-row',
          'data-episode-id': e.id,
          'data-status': e.status,
          class: detail.selected() === e.id ? 'selected' : undefined,
          onclick: () => detail.open(e.id),
        },
        // A real link (a new tab, a copied address): a plain click opens it in place.
        el(
          'td',
          {},
          el(
            'a',
            {
              href: `?episode=${encodeURIComponent(e.id)}`,
              'data-testid': 'episode-link',
              onclick: (ev) => ev.button === 0 && !ev.ctrlKey && !ev.metaKey && ev.preventDefault(),
            },
            time(e.startedAt || e.queuedAt || e.insertedAt),
          ),
        ),
        el('td', { class: 'wrap' }, `${e.actorId} / ${e.expectationId}`),
        el(
          'td',
          { 'data-testid': 'episode-status', class: 'wrap-narrow' },
          badge(e.status),
          ' ',
          waits(e),
        ),
        el('td', { class: 'num', 'data-testid': 'episode-attempt' }, attemptText(e)),
        el('td', { title: e.dedupeKey, class: 'wrap-narrow' }, trigger(e)),
        el('td', { class: 'wrap-narrow' }, e.ownerNode || '', ownerHealth(e)),
        el('td', {}, scope(e.sourceStack, e.sourceEnv)),
        el(
          'td',
          { class: e.errorClass ? 'error wrap' : 'wrap' },
          // The error's first line only: a stack trace belongs to the detail.
          short(
            e.errorClass
              ? `${e.errorClass}: ${(e.errorDetail || '').split('\n')[0]}`
              : e.summary || '',
            120,
          ),
        ),
      );
    }

    function render(result) {
      fill($('episodes-table').tBodies[0], result.items.map(row), 'no episodes match', 8);
      nextCursor = result.nextCursor;
      $('episodes-older').disabled = !result.nextCursor;
      $('episodes-newest').disabled = cursors.length === 1;
      $('episodes-page').textContent =
        cursors.length === 1 ? 'newest first' : `page ${cursors.length}, older episodes`;
    }

    /** The page on screen, read again with the filters. */
    const load = () =>
      api(`/api/episodes${query({ ...filters, limit: PAGE_SIZE, cursor: cursors.at(-1) })}`);

    /** A page the refresh loop read: drawn now, or when the pointer leaves the rows. */
    function show(result) {
      if (hovering) held = result;
      else render(result);
      drawn = true;
      $('episodes-held').hidden = !hovering;
    }

    function readFilters() {
      const form = $('episode-filters');
      filters = {};
      for (const name of URL_FILTERS) {
        const value = form.elements[name].value.trim();
        if (value) filters[name] = value;
      }
      cursors = [null];
      showBulk();
      page.writeUrl();
    }

    /** The filters into the page's address (`params`), in place of those it held. */
    function toUrl(params) {
      for (const name of URL_FILTERS) params.delete(name);
      for (const [name, value] of Object.entries(filters)) params.set(name, value);
    }

    /** A shared link's filters, into the form and the list. */
    function fromUrl(params) {
      const form = $('episode-filters');
      for (const name of URL_FILTERS) {
        const value = params.get(name);
        if (value) form.elements[name].value = value;
      }
      readFilters();
    }

    /**
     * The filters, and the find box: an episode's id opens it; another UUID is an event id, whose
     * episodes the list shows; anything else a dedupe key.
     */
    async function find() {
      const form = $('episode-filters');
      const text = form.elements.find.value.trim();
      form.elements.find.value = '';
      if (text && UUID.test(text)) {
        const found = await api(`/api/episodes/${encodeURIComponent(text)}`).catch(() => null);
        if (found) {
          readFilters();
          return detail.open(text);
        }
        form.elements.eventId.value = text;
      } else if (text) form.elements.dedupeKey.value = text;
      readFilters();
    }

    /** Retry all matching when the filter names a failed status; cancel all when a live one. */
    function showBulk() {
      $('bulk-retry').hidden = !RETRYABLE.includes(filters.status);
      $('bulk-cancel').hidden = !CANCELLABLE.includes(filters.status);
    }

    const filterText = () =>
      Object.entries(filters)
        .map(([name, value]) => `${name} ${value}`)
        .join(', ');

    /** One confirmation, then one request for the whole filtered set (at most BULK_LIMIT a call). */
    async function actOnMatching(verb) {
      const out = $('bulk-result');
      const question =
        `${verb === 'retry' ? 'Retry' : 'Cancel'} every episode matching ${filterText()}, ` +
        `up to ${BULK_LIMIT}?`;
      const confirmed = await confirmAction(question);
      if (!confirmed) return;
      out.hidden = false;
      try {
        const answer = await api(`/api/episodes/${verb}-matching`, {
          method: 'POST',
          body: { ...filters, limit: BULK_LIMIT, ...confirmed },
        });
        const done = Object.entries(answer.done || {})
          .filter(([, n]) => n > 0)
          .map(([result, n]) => `${n} ${result.replace(/_/g, ' ')}`)
          .join(', ');
        const refused = answer.refused || [];
        const first = refused[0];
        out.textContent =
          `${verb}: ${answer.matched} matched${done ? `; ${done}` : ''}` +
          (first
            ? `; ${refused.length} refused (${short(first.message || first.reason, 80)})`
            : '') +
          (answer.more ? `; more match: run it again for the next ${BULK_LIMIT}` : '');
        page.clearProblem();
        await page.refresh();
      } catch (error) {
        out.textContent = `${verb} refused: ${error.message}`;
      }
    }

    function wire() {
      const on = (testid, event, handler) => $(testid).addEventListener(event, handler);
      const reload = () => void page.refresh();
      on('episode-filters', 'submit', (ev) => (ev.preventDefault(), void find().then(reload)));
      on('episodes-table', 'mouseenter', () => (hovering = true));
      on('episodes-table', 'mouseleave', () => {
        hovering = false;
        $('episodes-held').hidden = true;
        if (held) render(held);
        held = null;
      });
      on('filter-clear', 'click', () => ($('episode-filters').reset(), readFilters(), reload()));
      on('episodes-older', 'click', () => nextCursor && (cursors.push(nextCursor), reload()));
      on('episodes-newest', 'click', () => ((cursors = [null]), reload()));
      on('bulk-retry', 'click', () => void actOnMatching('retry'));
      on('bulk-cancel', 'click', () => void actOnMatching('cancel'));
    }

    return {
      load,
      show,
      fromUrl,
      toUrl,
      wire,
      drawn: () => drawn,
    };
  }

  globalThis.CycliumEpisodeList = Object.freeze({ create });
})();
