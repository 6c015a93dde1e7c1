// The operations page's episode detail: one episode's fields, steps, timeline, findings and
// outputs, and the actions on it (cancel, retry, archive, a signal to its wait). Kept out of app.js,
// which hands over what it owns: the refresh loop, the banner and the page's address.
'use strict';

(function () {
  const { $, el, badge, time, scope, short, fill, genericTable, confirmAction } =
    globalThis.CycliumPageKit;
  const { ENDED, CANCELLABLE, RETRYABLE, waits, ref, trigger, failedStep } =
    globalThis.CycliumEpisodeWords;

  const CANCEL_SAYS = {
    canceled: 'canceled',
    requested: 'cancel requested: it stops at its next step',
    finished: 'already finished',
  };

  /**
   * `page`: the API client, the banner (showProblem, clearProblem), the page's address (writeUrl),
   * its refresh, and whether the episode list has been drawn yet (listDrawn).
   */
  function create(page) {
    const { api } = page;
    // The episode opened (a click, a link), and the one whose detail is on screen with the end it
    // shows: actions act on the one on screen, and only when it is the one opened.
    let selected = null;
    let shown = null;
    // The answer to the last action on an episode, kept until that episode moves on.
    let note = null;
    // The signal form of the episode shown, kept across refreshes (what the operator types stays).
    let signalFormOf = null;
    let scrollAgain = false;

    /** A label and its value; none when there is no value, so the detail lists what is known. */
    function field(label, value) {
      if (value === null || value === undefined || value === '') return [];
      return [el('dt', {}, label), el('dd', {}, value)];
    }

    function renderDetail(detail) {
      const e = detail.episode;
      shown = { id: e.id, end: e.finishedAt ?? null };
      actionsEnabled(true);
      $('detail-id').textContent = e.id;
      $('detail-fields').replaceChildren(
        ...field('actor / expectation', `${e.actorId} / ${e.expectationId}`),
        ...field(
          'status',
          el('span', { 'data-testid': 'detail-status', class: `badge ${e.status}` }, e.status),
        ),
        ...field(
          'failed in',
          failedStep(e)
            ? el('span', { 'data-testid': 'detail-failed-step' }, failedStep(e).text)
            : null,
        ),
        ...field(
          'version',
          e.version ? el('code', { 'data-testid': 'detail-version' }, e.version) : null,
        ),
        ...field(
          'waiting for',
          e.waitingFor ? el('span', { 'data-testid': 'detail-due' }, waits(e)) : null,
        ),
        ...field(
          'children',
          e.wait && e.wait.kind === 'children'
            ? el(
                'ul',
                { class: 'children', 'data-testid': 'detail-children' },
                e.wait.children.map((c) =>
                  el('li', {}, el('code', {}, c.id), ' ', badge(c.status)),
                ),
              )
            : null,
        ),
        ...field('send a signal', e.wait && e.wait.kind === 'signal' ? signalForm(e) : null),
        ...field(
          'attempt',
          el(
            'span',
            { 'data-testid': 'detail-attempt' },
            e.startedAt
              ? `${(e.retries || 0) + 1} of ${e.retryAttempts || 1}` +
                  (e.retryAttempts ? ' (its retry policy)' : ' (no retry policy)')
              : 'not started',
          ),
        ),
        ...field('retries', e.retries ? String(e.retries) : null),
        ...field(
          'crash recoveries',
          e.attempts ? `${e.attempts} of at most ${e.maxAttempts ?? 'unlimited'}` : null,
        ),
        ...field('trigger', trigger(e)),
        ...field('event id', ref(e).eventId ? el('code', {}, ref(e).eventId) : null),
        ...field(
          'payload',
          el('pre', { class: 'payload' }, JSON.stringify(ref(e).payload ?? null, null, 2)),
        ),
        ...field('dedupe key', el('code', { 'data-testid': 'detail-dedupe-key' }, e.dedupeKey)),
        ...field('owner node', e.ownerNode),
        // An episode of a limited expectation: its partitions and its place in the waiting order.
        ...(e.flowKey === null || e.flowKey === undefined
          ? []
          : [
              ...field(
                'flow key',
                el('code', { 'data-testid': 'detail-flow-key' }, e.flowKey || "''"),
              ),
              ...field('rate key', e.rateKey === null ? null : el('code', {}, e.rateKey || "''")),
              ...field('priority', e.priority),
            ]),
        ...field('stack / env', scope(e.sourceStack, e.sourceEnv)),
        ...field('queued', e.queuedAt ? time(e.queuedAt) : null),
        ...field('started', e.startedAt ? time(e.startedAt) : null),
        ...field('finished', e.finishedAt ? time(e.finishedAt) : null),
        ...field(
          'archived',
          e.archivedAt
            ? el('span', { 'data-testid': 'detail-archived' }, time(e.archivedAt))
            : null,
        ),
        ...field('cancel requested', e.cancelRequestedAt ? time(e.cancelRequestedAt) : null),
        ...field('workflow instance', e.workflowInstanceId),
        ...field('summary', e.summary),
      );
      const error = $('detail-error');
      error.hidden = !e.errorClass;
      error.replaceChildren(
        ...(e.errorClass
          ? [el('strong', {}, e.errorClass), el('pre', {}, e.errorDetail || '')]
          : []),
      );
      $('cancel-button').hidden = !CANCELLABLE.includes(e.status);
      $('retry-box').hidden = !RETRYABLE.includes(e.status);
      $('retry-note').textContent =
        e.status === 'failed' && !e.archivedAt
          ? 'resumes it from its journal: steps that completed do not run again'
          : 'starts a new episode; its steps run again from the first';
      $('archive-box').hidden = !e.finishedAt || Boolean(e.archivedAt);
      const steps = detail.steps.map((s) => {
        // A retry's marker carries the failed attempt's error in its result.
        const retry = s.name === 'retry' && s.resultRef && typeof s.resultRef === 'object';
        const error = s.errorClass || (retry && s.resultRef.errorClass);
        const said = retry ? s.resultRef.error : null;
        return el(
          'tr',
          { 'data-testid': 'step-row', 'data-kind': s.kind },
          el('td', { class: 'num' }, s.stepNo),
          el('td', {}, s.kind),
          el('td', {}, s.name),
          el(
            'td',
            { class: 'num' },
            s.durationMs === null || s.durationMs === undefined ? '' : `${s.durationMs} ms`,
          ),
          el(
            'td',
            { class: error ? 'error wrap' : undefined, 'data-testid': 'step-error' },
            error ? `${error}${said ? `: ${short(said, 100)}` : ''}` : '',
          ),
          el(
            'td',
            { title: typeof s.resultRef === 'string' ? s.resultRef : JSON.stringify(s.resultRef) },
            short(s.resultRef ?? '', 60),
          ),
          el('td', {}, time(s.createdAt)),
        );
      });
      // The step that threw is not journaled (only completed steps are): its row comes from the end.
      const failed = failedStep(e);
      if (failed)
        steps.push(
          el(
            'tr',
            { 'data-testid': 'step-row', 'data-kind': 'failed', class: 'failure' },
            el('td', { class: 'num' }, failed.stepNo),
            el('td', {}, `${failed.kind}, failed`),
            el('td', {}, failed.name),
            el('td', {}, ''),
            el(
              'td',
              { class: 'error wrap', 'data-testid': 'step-error' },
              `${e.errorClass}: ${short(failed.error.split('\n')[0], 100)}`,
            ),
            el('td', {}, ''),
            el('td', {}, time(e.finishedAt)),
          ),
        );
      fill($('steps-table').tBodies[0], steps, 'no steps journaled yet', 7);
      // timeline.js draws it; the page still works should that file fail to load.
      const timeline = globalThis.CycliumTimeline;
      $('episode-timeline-box').replaceChildren(timeline ? timeline.render(e, detail.steps) : '');
      noteSince(e);
      $('detail-findings').replaceChildren(genericTable(detail.findings, 'findings-table'));
      $('detail-outputs').replaceChildren(genericTable(detail.outputs, 'outputs-table'));
      $('detail-trigger-requests').replaceChildren(
        genericTable(detail.triggerRequests, 'episode-trigger-requests-table'),
      );
    }

    /**
     * An action's answer stays next to the episode until it ends again; then it says how. "Again" is
     * an end later than the one on screen when the action was sent, both the database's times: the
     * browser's clock would miss an episode that ended before the action's answer arrived.
     */
    function noteSince(e) {
      if (!note || note.id !== e.id || note.ended || !ENDED.includes(e.status)) return;
      if (!e.finishedAt) return;
      if (note.endBefore && Date.parse(e.finishedAt) <= Date.parse(note.endBefore)) return;
      note.ended = true;
      $('action-result').append(
        el('span', { 'data-testid': 'action-since' }, `; since then it ended ${e.status}`),
      );
    }

    /** Another row clicked while this one loaded wins: an answer for an episode no longer selected is dropped. */
    function renderSelected(id, detail) {
      if (selected !== id) return;
      renderDetail(detail);
      $('episode-detail').hidden = false;
    }

    async function open(id) {
      selected = id;
      note = null;
      shown = null;
      // Until this episode's detail arrives, the one on screen is another's: its buttons wait.
      actionsEnabled(false);
      $('action-result').textContent = '';
      page.writeUrl();
      for (const row of document.querySelectorAll('[data-testid="episode-row"]'))
        row.classList.toggle('selected', row.dataset.episodeId === id);
      try {
        renderSelected(id, await api(`/api/episodes/${encodeURIComponent(id)}`));
        // Opened from a row far down or from a link: the detail comes into view, title first.
        if (selected === id) scrollToDetail();
      } catch (error) {
        if (error.status === 404 && selected === id) {
          $('action-result').textContent = '';
          page.showProblem(Object.assign(error, { message: `no episode ${id}` }));
        } else page.showProblem(error);
      }
    }

    /**
     * A link opens the episode while the first refresh draws the list above it, which would push the
     * detail down again: until the list is drawn, the refresh scrolls once more.
     */
    function scrollToDetail() {
      $('episode-detail').scrollIntoView({ block: 'start' });
      scrollAgain = !page.listDrawn();
    }

    function close() {
      selected = null;
      note = null;
      shown = null;
      $('episode-detail').hidden = true;
      for (const row of document.querySelectorAll('[data-testid="episode-row"].selected'))
        row.classList.remove('selected');
      page.writeUrl();
    }

    /**
     * Sends a signal to the episode shown (its wait's name by default, a JSON payload). The same form
     * is kept across refreshes of one episode, so what the operator types is not wiped every 2 s.
     */
    function signalForm(e) {
      if (signalFormOf && signalFormOf.id === e.id) return signalFormOf.form;
      const name = el('input', { 'data-testid': 'signal-name', value: e.wait.name, size: 20 });
      const payload = el('textarea', { 'data-testid': 'signal-payload', rows: 2, cols: 40 }, '{}');
      const send = async (event) => {
        event.preventDefault();
        const result = $('action-result');
        let body;
        try {
          body = { name: name.value, payload: JSON.parse(payload.value || 'null') };
        } catch (error) {
          result.textContent = `the payload is not JSON: ${error.message}`;
          return;
        }
        try {
          const answer = await api(`/api/episodes/${encodeURIComponent(e.id)}/signal`, {
            method: 'POST',
            body,
          });
          result.textContent = answer.woke ? 'signal sent: the episode resumes' : 'signal stored';
          void page.refresh();
        } catch (error) {
          result.textContent = error.message;
        }
      };
      const form = el(
        'form',
        { 'data-testid': 'signal-form', onsubmit: send },
        name,
        ' ',
        payload,
        ' ',
        el('button', { type: 'submit', 'data-testid': 'signal-send' }, 'Send signal'),
      );
      signalFormOf = { id: e.id, form };
      return form;
    }

    const ASK = {
      cancel: (id) =>
        `Cancel episode ${id}? A waiting one ends now; a running one at its next step.`,
      retry: (id) => `Retry episode ${id}? ${$('retry-note').textContent}.`,
      archive: (id) => `Archive episode ${id}? Its dedupe key is free at once.`,
    };

    function actionsEnabled(on) {
      for (const button of ['cancel-button', 'retry-button', 'archive-button'])
        $(button).disabled = !on;
    }

    async function act(verb) {
      // The episode on screen, not one still loading: the end it shows is what "again" is after.
      const current = shown;
      if (!current || current.id !== selected) return;
      const { id, end: endBefore } = current;
      const result = $('action-result');
      const confirmed = await confirmAction(ASK[verb](id));
      if (!confirmed) return;
      try {
        const answer = await api(`/api/episodes/${encodeURIComponent(id)}/${verb}`, {
          method: 'POST',
          body: confirmed,
        });
        note = { id, endBefore, ended: false };
        if (verb === 'cancel') result.textContent = CANCEL_SAYS[answer.result] || answer.result;
        else if (verb === 'archive')
          result.textContent =
            answer.result === 'archived' ? 'archived: its dedupe key is free' : 'already archived';
        else if (answer.result === 'resumed')
          result.textContent =
            'resumed from its journal: the next node free to run it takes it now';
        // No episode yet when the retry waits (a deferred trigger request, say): its dedupe key still finds it.
        else if (!answer.episode)
          result.textContent = `retry ${answer.dispatch || 'accepted'}, dedupe key ${answer.dedupeKey}`;
        else {
          const openNew = (ev) => (ev.preventDefault(), open(answer.episode.id));
          const link = el(
            'a',
            { href: '#', 'data-testid': 'retry-new-episode', onclick: openNew },
            answer.episode.id,
          );
          result.replaceChildren(
            'new episode ',
            link,
            ` (${answer.episode.status}), dedupe key ${answer.dedupeKey}`,
          );
        }
        page.clearProblem();
        await page.refresh();
      } catch (error) {
        result.textContent = `${verb} refused: ${error.message}`;
      }
    }

    /** The selected episode's detail again, for the refresh loop. */
    async function refresh() {
      const id = selected;
      if (!id) return;
      renderSelected(id, await api(`/api/episodes/${encodeURIComponent(id)}`));
      if (scrollAgain && !$('episode-detail').hidden) scrollToDetail();
    }

    function wire() {
      $('detail-close').addEventListener('click', close);
      $('cancel-button').addEventListener('click', () => void act('cancel'));
      $('retry-button').addEventListener('click', () => void act('retry'));
      $('archive-button').addEventListener('click', () => void act('archive'));
    }

    return { open, close, refresh, wire, selected: () => selected };
  }

  globalThis.CycliumEpisodeDetail = Object.freeze({ create });
})();
