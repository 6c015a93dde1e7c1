// The operations page's actors: each one's cluster-wide pause and resume, and the form that starts
// an episode by hand. Kept out of app.js, which hands over its refresh and the episode detail.
'use strict';

(function () {
  const { $, el, badge, time, fill, confirmAction, loadFailed } = globalThis.CycliumPageKit;

  /** `page`: the API client, the episode detail's opener (openEpisode) and the page's refresh. */
  function create(page) {
    const { api } = page;

    async function pauseOrResume(a) {
      const verb = a.paused ? 'resume' : 'pause';
      const question = a.paused
        ? `Resume ${a.actorId} on every node of this stack and env? Its waiting work starts.`
        : `Pause ${a.actorId} on every node of this stack and env? Nothing of it starts until ` +
          `resumed; running episodes finish, its triggers wait.`;
      const confirmed = await confirmAction(question);
      if (!confirmed) return;
      const result = $('actors-result');
      try {
        const answer = await api(`/api/actors/${encodeURIComponent(a.actorId)}/${verb}`, {
          method: 'POST',
          body: confirmed,
        });
        result.textContent = `${a.actorId}: ${answer.result.replace(/_/g, ' ')}`;
        void page.refresh();
      } catch (error) {
        result.textContent = `${verb} refused: ${error.message}`;
      }
    }

    function actorRow(a) {
      const standing = a.paused
        ? [
            badge('paused', 'warn'),
            el(
              'span',
              { class: 'muted small' },
              ` since `,
              time(a.paused.pausedAt),
              a.paused.reason ? `: ${a.paused.reason}` : '',
            ),
          ]
        : badge('running', 'live');
      return el(
        'tr',
        { 'data-testid': 'actor-row', 'data-actor': a.actorId, 'data-paused': String(!!a.paused) },
        el('td', {}, el('code', {}, a.actorId)),
        el('td', { 'data-testid': 'actor-state' }, standing),
        el('td', {}, a.mode),
        el(
          'td',
          {},
          el(
            'button',
            { type: 'button', 'data-testid': 'actor-toggle', onclick: () => pauseOrResume(a) },
            a.paused ? 'Resume…' : 'Pause…',
          ),
        ),
      );
    }

    /** The start form's choices: every expectation of the actors this node declares. */
    function fillStartChoices(items) {
      const select = $('start-expectation');
      const choices = items.flatMap((a) => a.expectations.map((x) => `${a.actorId}.${x}`));
      if (select.dataset.choices === choices.join()) return;
      select.dataset.choices = choices.join();
      select.replaceChildren(...choices.map((c) => el('option', { value: c }, c)));
    }

    /** Starts an episode by hand; the answer links to it. */
    async function startEpisode(ev) {
      ev.preventDefault();
      const form = $('start-form');
      const out = $('start-result');
      const [actorId, expectationId] = form.elements.expectation.value.split(/\.(.*)/s);
      const body = { actorId, expectationId };
      try {
        body.payload = JSON.parse(form.elements.payload.value || '{}');
      } catch (error) {
        out.textContent = `payload: not JSON (${error.message})`;
        return;
      }
      const key = form.elements.dedupeKey.value.trim();
      if (key) body.dedupeKey = key;
      const delay = form.elements.delayMs.value.trim();
      if (delay) body.delayMs = Number(delay);
      try {
        const answer = await api('/api/episodes/start', { method: 'POST', body });
        const open = (e) => (e.preventDefault(), page.openEpisode(answer.episode.id));
        out.replaceChildren(
          `${answer.status}`,
          ...(answer.episode
            ? [
                ': ',
                el(
                  'a',
                  {
                    href: `?episode=${answer.episode.id}`,
                    'data-testid': 'start-episode',
                    onclick: open,
                  },
                  answer.episode.id,
                ),
              ]
            : []),
        );
        void page.refresh();
      } catch (error) {
        out.textContent = `start refused: ${error.message}`;
      }
    }

    async function refreshActors() {
      const box = $('actors');
      try {
        const { items } = await api('/api/actors');
        fillStartChoices(items);
        const table = el(
          'table',
          { 'data-testid': 'actors-table' },
          el(
            'thead',
            {},
            el('tr', {}, ...['actor', 'cluster-wide', 'mode here', ''].map((h) => el('th', {}, h))),
          ),
          el('tbody', {}),
        );
        fill(table.tBodies[0], items.map(actorRow), 'no actor declared on this node', 4);
        box.replaceChildren(table);
      } catch (error) {
        box.replaceChildren(loadFailed(error));
      }
    }

    function wire() {
      $('start-form').addEventListener('submit', (ev) => void startEpisode(ev));
    }

    return { refresh: refreshActors, wire };
  }

  globalThis.CycliumActors = Object.freeze({ create });
})();
