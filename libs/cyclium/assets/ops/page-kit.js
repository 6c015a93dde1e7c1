// The operations page's small helpers, shared by every part of it: elements built from data (never
// from markup), the JSON API client, relative times, badges, tables and the confirmation dialog.
// No page state lives here: each part keeps its own.
'use strict';

(function () {
  const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

  /** An element with attributes and children; strings become text nodes, so data is never parsed as HTML. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') node.className = value;
      else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const apiError = (status, message) => Object.assign(new Error(message), { status });

  /**
   * The client of the module's JSON API under `base`. Each request sits in `pending` (its start
   * time, and whether it is a pulse) while it is on its way, so the page can say when one hangs.
   * A failure is an Error with the HTTP status (0: the server did not answer).
   */
  function apiClient(base, pending) {
    return async function api(path, options) {
      const init = { headers: { accept: 'application/json' }, credentials: 'same-origin' };
      if (options && options.method === 'POST') {
        init.method = 'POST';
        // The server refuses state changes without this header: a cross-site form cannot send it.
        init.headers['x-cyclium-ops'] = '1';
        init.headers['content-type'] = 'application/json';
        init.body = JSON.stringify(options.body || {});
      }
      let response;
      const asked = { at: Date.now(), pulse: Boolean(options && options.pulse) };
      pending.add(asked);
      try {
        response = await fetch(base + path, init);
      } catch (error) {
        throw apiError(0, `server unreachable (${error.message})`);
      } finally {
        pending.delete(asked);
      }
      const body = await response.json().catch(() => null);
      if (!response.ok) {
        const message =
          body && body.message !== undefined
            ? [].concat(body.message).join('; ')
            : response.statusText;
        throw apiError(response.status, message);
      }
      return body;
    };
  }

  /** `?a=1&b=2` from the params that have a value; '' when none has. */
  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params))
      if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
    const text = search.toString();
    return text ? `?${text}` : '';
  }

  function ago(iso) {
    if (!iso) return '—';
    const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
    const span = (s) =>
      s < 60
        ? `${s} s`
        : s < 3600
          ? `${Math.round(s / 60)} min`
          : s < 86400
            ? `${Math.round(s / 3600)} h`
            : `${Math.round(s / 86400)} d`;
    // A due time is ahead; a second or two ahead otherwise is this browser's clock against the database's.
    return seconds < -2 ? `in ${span(-seconds)}` : `${span(Math.max(seconds, 0))} ago`;
  }

  const time = (iso) => (iso ? el('time', { datetime: iso, title: iso }, ago(iso)) : '—');
  const badge = (text, kind) => el('span', { class: `badge ${kind || text}` }, text);
  const scope = (stack, env) => `${stack || 'default'} / ${env || 'default'}`;

  function short(value, max) {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    if (text === undefined) return '';
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function fill(tbody, rows, emptyText, columns) {
    tbody.replaceChildren(
      ...(rows.length
        ? rows
        : [el('tr', {}, el('td', { colspan: columns, class: 'muted' }, emptyText))]),
    );
  }

  /** A table of whatever objects a list route returns: the first item's keys are the columns. */
  function genericTable(items, testid) {
    if (!items || items.length === 0)
      return el('p', { class: 'muted', 'data-testid': testid }, 'none');
    const keys = Object.keys(items[0]);
    const cell = (value) =>
      el(
        'td',
        { title: value !== null && typeof value === 'object' ? JSON.stringify(value) : undefined },
        short(value ?? '', 80),
      );
    const head = el('thead', {}, el('tr', {}, ...keys.map((k) => el('th', {}, k))));
    return el(
      'table',
      { 'data-testid': testid },
      head,
      el('tbody', {}, ...items.map((item) => el('tr', {}, ...keys.map((k) => cell(item[k]))))),
    );
  }

  /** What a part of the page shows in its place when its read failed: the rest of the page stays live. */
  const loadFailed = (error) => el('p', { class: 'error' }, `could not load: ${error.message}`);

  /**
   * Asks before an action that changes work, in the page's own dialog (the reason goes with the
   * request, and the server logs it): resolves to { reason } or null when the operator backs out.
   */
  function confirmAction(question) {
    const dialog = $('confirm-dialog');
    const form = $('confirm-form');
    $('confirm-question').textContent = question;
    form.elements.reason.value = '';
    return new Promise((resolve) => {
      const done = (answer) => {
        form.onsubmit = null;
        $('confirm-back').onclick = null;
        dialog.onclose = null;
        if (dialog.open) dialog.close();
        resolve(answer);
      };
      form.onsubmit = (ev) => {
        ev.preventDefault();
        const reason = form.elements.reason.value.trim();
        done(reason ? { reason } : {});
      };
      $('confirm-back').onclick = () => done(null);
      // Escape closes it: the same as Back.
      dialog.onclose = () => done(null);
      dialog.showModal();
    });
  }

  globalThis.CycliumPageKit = Object.freeze({
    $,
    el,
    apiClient,
    query,
    ago,
    time,
    badge,
    scope,
    short,
    fill,
    genericTable,
    loadFailed,
    confirmAction,
  });
})();
