// The operations page: plain browser JavaScript over the module's JSON API, no framework, no build.
// Every value from the server reaches the DOM as text (textContent), never as markup.
'use strict';

(function () {
  // The server writes a <base> naming the mount path; without one, the page's own path is the mount.
  const mount = document.querySelector('base')
    ? new URL(document.baseURI).pathname
    : location.pathname;
  const BASE = mount.replace(/\/(index\.html)?$/, '');
  const POLL_MS = 2000;
  // A request unanswered this long says so on the page, without waiting for it to fail.
  const SLOW_MS = 1500;
  // Between refreshes, a pulse asks whether the database answers (one shared SELECT 1 on the
  // server): a freeze shows within about PULSE_MS + PULSE_SLOW_MS.
  const PULSE_MS = 500;
  const PULSE_SLOW_MS = 1000;
  // The filters and the episode shown live in the page's address, so a link shows the same view.
  const URL_FILTERS = ['actor', 'status', 'stack', 'env', 'eventId', 'dedupeKey'];
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  // `?pageSize=` in the page's address, for a long table or a short one (the API allows 1 to 100).
  const PAGE_SIZE = Math.min(
    Math.max(Number(new URLSearchParams(location.search).get('pageSize')) || 25, 1),
    100,
  );
  const CANCELLABLE = ['queued', 'throttled', 'deferred', 'waiting', 'running', 'blocked'];
  const RETRYABLE = ['failed', 'partially_failed'];
  const WAITS_FOR = {
    start: 'runs later',
    retry: 'retry backoff',
    sleep: 'sleeping',
    resume: 'resumes',
    wait: 'waiting',
  };
  const HEALTH_SAYS = {
    live: 'beats on time',
    suspect: 'its beat is late: it may have died; its runs are marked until it beats or is stale',
    stale: 'no beat for two intervals: recovery takes its work over',
  };
  const CANCEL_SAYS = {
    canceled: 'canceled',
    requested: 'cancel requested: it stops at its next step',
    finished: 'already finished',
  };

  const state = {
    live: true,
    filters: {},
    // Keyset paging: the cursor of each page shown so far; the last one is the page on screen.
    cursors: [null],
    nextCursor: null,
    selected: null,
    busy: false,
    again: false,
    node: null,
    // identity -> live | suspect | stale, from the last cluster read: marks runs of a silent node.
    nodeHealth: new Map(),
    // Requests on their way (start times), and when data last arrived whole.
    pending: new Set(),
    refreshedAt: null,
    // The answer to the last action on an episode, kept until that episode moves on.
    note: null,
    // The episode whose detail is on screen, and the end it shows: actions act on it alone.
    shown: null,
    // When the chart of the last hour was last read (Date.now()), null to read it at once.
    historyAt: null,
  };

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

  async function api(path, options) {
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
    state.pending.add(asked);
    try {
      response = await fetch(BASE + path, init);
    } catch (error) {
      throw apiError(0, `server unreachable (${error.message})`);
    } finally {
      state.pending.delete(asked);
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
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params))
      if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
    const text = search.toString();
    return text ? `?${text}` : '';
  }

  // --- formatting -------------------------------------------------------------------------------

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
  const ENDED = ['done', 'partially_failed', 'failed', 'canceled'];
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
  const scope = (stack, env) => `${stack || 'default'} / ${env || 'default'}`;
  const ref = (e) => e.triggerRef || {};
  const trigger = (e) =>
    [e.triggerType, ref(e).eventType, ref(e).scheduledAt].filter(Boolean).join(' ');

  function short(value, max) {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    if (text === undefined) return '';
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function sweepText(sweep) {
    if (!sweep) return '—';
    if (sweep.error) return `${ago(sweep.at)}: error ${sweep.error}`;
    const r = sweep.result;
    if (!r) return ago(sweep.at);
    const parts = ['restarted', 'deferred', 'failed', 'notHosted', 'skipped']
      .filter((k) => r[k])
      .map((k) => `${k} ${r[k]}`);
    return `${ago(sweep.at)}: ${parts.length ? parts.join(', ') : 'nothing to do'}`;
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

  // --- banner -----------------------------------------------------------------------------------

  const dataFrom = () =>
    state.refreshedAt ? `; the data below is from ${state.refreshedAt.toLocaleTimeString()}` : '';

  function showProblem(error) {
    const banner = $('banner');
    banner.hidden = false;
    banner.dataset.kind = 'error';
    banner.textContent =
      (error.status === 503
        ? 'database unavailable: retrying every 2 s'
        : error.status === 0
          ? error.message
          : `error ${error.status}: ${error.message}`) + dataFrom();
    document.body.classList.add('stale');
  }

  function clearProblem() {
    $('banner').hidden = true;
    document.body.classList.remove('stale');
  }

  /**
   * A request that hangs (a frozen database holds the server's query, not its socket) would leave
   * the last data looking current until it fails; past SLOW_MS the page says so.
   */
  function watchSlow() {
    const now = Date.now();
    const late = [...state.pending].filter(
      (p) => now - p.at >= (p.pulse ? PULSE_SLOW_MS : SLOW_MS),
    );
    if (late.length === 0) return;
    const oldest = Math.min(...late.map((p) => p.at));
    const banner = $('banner');
    if (!banner.hidden && banner.dataset.kind === 'error') return;
    banner.hidden = false;
    banner.dataset.kind = 'slow';
    banner.textContent =
      `no answer for ${Math.round((now - oldest) / 1000)} s: the database may be slow, ` +
      `frozen or unreachable${dataFrom()}`;
    document.body.classList.add('stale');
  }

  // --- header: this node ------------------------------------------------------------------------

  function renderNode(node) {
    state.node = { identity: node.identity ?? node.nodeIdentity, mode: node.mode };
    $('node-identity').textContent = state.node.identity;
    $('node-scope').textContent = scope(node.stack, node.env);
    const mode = $('node-mode');
    mode.textContent = node.mode;
    mode.className = `badge mode-${node.mode}`;
    mode.title = Object.keys(node.modes?.actorOverrides || {}).length
      ? `overrides: ${JSON.stringify(node.modes.actorOverrides)}`
      : 'no per-actor overrides';
    $('node-draining').hidden = !node.draining;
    const select = $('mode-select');
    if (document.activeElement !== select && !select.dataset.touched) select.value = node.mode;
  }

  async function applyMode() {
    const select = $('mode-select');
    try {
      const result = await api('/api/mode', { method: 'POST', body: { mode: select.value } });
      delete select.dataset.touched;
      $('node-mode').textContent = result.mode;
      $('node-mode').className = `badge mode-${result.mode}`;
      clearProblem();
    } catch (error) {
      showProblem(error);
    }
  }

  // --- cluster ----------------------------------------------------------------------------------

  function renderCluster(cluster) {
    const self = (n) => state.node && n.identity === state.node.identity;
    // A row from a release without `health` says only live or not.
    const healthOf = (n) => n.health || (n.live ? 'live' : 'stale');
    state.nodeHealth = new Map(cluster.nodes.map((n) => [n.identity, healthOf(n)]));
    const nodeRows = cluster.nodes.map((n) =>
      el(
        'tr',
        {
          'data-testid': 'node-row',
          'data-identity': n.identity,
          'data-health': healthOf(n),
          class: self(n) ? 'self' : undefined,
        },
        el(
          'td',
          {},
          el('code', {}, n.identity),
          self(n) ? el('span', { class: 'muted small' }, ' (this page)') : null,
        ),
        el(
          'td',
          { 'data-testid': 'node-health', title: HEALTH_SAYS[healthOf(n)] },
          badge(healthOf(n)),
        ),
        // A node's row learns a mode change at its next beat; this node's own answer is already current.
        el('td', {}, self(n) ? state.node.mode : n.mode),
        el('td', {}, scope(n.stack, n.env)),
        el('td', {}, `${n.hostname} / ${n.pid}`),
        el('td', {}, n.version),
        el('td', { class: 'num' }, n.runningEpisodes),
        el('td', { class: 'num' }, n.liveClaims),
        el('td', {}, time(n.lastSeenAt)),
        el('td', {}, sweepText(n.lastSweep)),
      ),
    );
    fill($('nodes-table').tBodies[0], nodeRows, 'no nodes', 10);
    const countRows = (counts) =>
      counts.map((c) =>
        el(
          'tr',
          {},
          el('td', {}, c.actorId),
          el('td', {}, badge(c.status)),
          el('td', { class: 'num' }, c.count),
        ),
      );
    fill($('active-counts').tBodies[0], countRows(cluster.active), 'nothing waiting or running', 3);
    fill(
      $('finished-counts').tBodies[0],
      countRows(cluster.finished.counts),
      'nothing finished',
      3,
    );
    $('finished-window').textContent =
      `(last ${Math.round(cluster.finished.windowMs / 60000)} min)`;
    $('trigger-summary').textContent =
      `${cluster.triggerRequests.pending} pending, ${cluster.triggerRequests.scheduled ?? 0} ` +
      `scheduled, ${cluster.triggerRequests.expiredInWindow} expired in the window`;
  }

  // --- episodes ---------------------------------------------------------------------------------

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
    const health = e.status === 'running' && state.nodeHealth.get(e.ownerNode);
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

  function renderEpisodes(page) {
    const rows = page.items.map((e) =>
      el(
        'tr',
        {
          'data-testid': 'episode-row',
          'data-episode-id': e.id,
          'data-status': e.status,
          class: state.selected === e.id ? 'selected' : undefined,
          onclick: () => openEpisode(e.id),
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
      ),
    );
    fill($('episodes-table').tBodies[0], rows, 'no episodes match', 8);
    state.nextCursor = page.nextCursor;
    $('episodes-older').disabled = !page.nextCursor;
    $('episodes-newest').disabled = state.cursors.length === 1;
    $('episodes-page').textContent =
      state.cursors.length === 1 ? 'newest first' : `page ${state.cursors.length}, older episodes`;
  }

  function readFilters() {
    const form = $('episode-filters');
    state.filters = {};
    for (const name of URL_FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) state.filters[name] = value;
    }
    state.cursors = [null];
    showBulk();
    writeUrl();
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
        return openEpisode(text);
      }
      form.elements.eventId.value = text;
    } else if (text) form.elements.dedupeKey.value = text;
    readFilters();
  }

  /**
   * The filters, the episode and the workflow instance shown, into the address (other parameters,
   * like pageSize, kept).
   */
  function writeUrl() {
    const params = new URLSearchParams(location.search);
    for (const name of [...URL_FILTERS, 'episode', 'workflow']) params.delete(name);
    for (const [name, value] of Object.entries(state.filters)) params.set(name, value);
    if (state.selected) params.set('episode', state.selected);
    if (workflows.selected()) params.set('workflow', workflows.selected());
    const search = params.toString();
    history.replaceState(null, '', `${location.pathname}${search ? `?${search}` : ''}`);
  }

  /** A shared link: its filters into the form, its workflow instance and episode opened. */
  function readUrl() {
    const params = new URLSearchParams(location.search);
    const form = $('episode-filters');
    for (const name of URL_FILTERS) {
      const value = params.get(name);
      if (value) form.elements[name].value = value;
    }
    readFilters();
    const episode = params.get('episode');
    const workflow = params.get('workflow');
    if (workflow) void workflows.open(workflow);
    if (episode) void openEpisode(episode);
  }

  const loadEpisodes = () =>
    api(
      `/api/episodes${query({ ...state.filters, limit: PAGE_SIZE, cursor: state.cursors[state.cursors.length - 1] })}`,
    );

  // --- one episode ------------------------------------------------------------------------------

  /** A label and its value; none when there is no value, so the detail lists what is known. */
  function field(label, value) {
    if (value === null || value === undefined || value === '') return [];
    return [el('dt', {}, label), el('dd', {}, value)];
  }

  function renderDetail(detail) {
    const e = detail.episode;
    state.shown = { id: e.id, end: e.finishedAt ?? null };
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
              e.wait.children.map((c) => el('li', {}, el('code', {}, c.id), ' ', badge(c.status))),
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
        e.archivedAt ? el('span', { 'data-testid': 'detail-archived' }, time(e.archivedAt)) : null,
      ),
      ...field('cancel requested', e.cancelRequestedAt ? time(e.cancelRequestedAt) : null),
      ...field('workflow instance', e.workflowInstanceId),
      ...field('summary', e.summary),
    );
    const error = $('detail-error');
    error.hidden = !e.errorClass;
    error.replaceChildren(
      ...(e.errorClass ? [el('strong', {}, e.errorClass), el('pre', {}, e.errorDetail || '')] : []),
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

  /**
   * An action's answer stays next to the episode until it ends again; then it says how. "Again" is
   * an end later than the one on screen when the action was sent, both the database's times: the
   * browser's clock would miss an episode that ended before the action's answer arrived.
   */
  function noteSince(e) {
    const note = state.note;
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
    if (state.selected !== id) return;
    renderDetail(detail);
    $('episode-detail').hidden = false;
  }

  async function openEpisode(id) {
    state.selected = id;
    state.note = null;
    state.shown = null;
    // Until this episode's detail arrives, the one on screen is another's: its buttons wait.
    actionsEnabled(false);
    $('action-result').textContent = '';
    writeUrl();
    for (const row of document.querySelectorAll('[data-testid="episode-row"]'))
      row.classList.toggle('selected', row.dataset.episodeId === id);
    try {
      renderSelected(id, await api(`/api/episodes/${encodeURIComponent(id)}`));
      // Opened from a row far down or from a link: the detail comes into view, title first.
      if (state.selected === id) scrollToDetail();
    } catch (error) {
      if (error.status === 404 && state.selected === id) {
        $('action-result').textContent = '';
        showProblem(Object.assign(error, { message: `no episode ${id}` }));
      } else showProblem(error);
    }
  }

  /**
   * A link opens the episode while the first refresh draws the list above it, which would push the
   * detail down again: until the list is drawn, the refresh scrolls once more.
   */
  function scrollToDetail() {
    $('episode-detail').scrollIntoView({ block: 'start' });
    state.scrollAgain = !state.listDrawn;
  }

  function closeEpisode() {
    state.selected = null;
    state.note = null;
    state.shown = null;
    $('episode-detail').hidden = true;
    for (const row of document.querySelectorAll('[data-testid="episode-row"].selected'))
      row.classList.remove('selected');
    writeUrl();
  }

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

  /**
   * Sends a signal to the episode shown (its wait's name by default, a JSON payload). The same form
   * is kept across refreshes of one episode, so what the operator types is not wiped every 2 s.
   */
  function signalForm(e) {
    if (state.signalForm && state.signalForm.id === e.id) return state.signalForm.form;
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
        void refresh();
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
    state.signalForm = { id: e.id, form };
    return form;
  }

  const ASK = {
    cancel: (id) => `Cancel episode ${id}? A waiting one ends now; a running one at its next step.`,
    retry: (id) => `Retry episode ${id}? ${$('retry-note').textContent}.`,
    archive: (id) => `Archive episode ${id}? Its dedupe key is free at once.`,
  };

  function actionsEnabled(on) {
    for (const button of ['cancel-button', 'retry-button', 'archive-button'])
      $(button).disabled = !on;
  }

  async function act(verb) {
    // The episode on screen, not one still loading: the end it shows is what "again" is after.
    const shown = state.shown;
    if (!shown || shown.id !== state.selected) return;
    const { id, end: endBefore } = shown;
    const result = $('action-result');
    const confirmed = await confirmAction(ASK[verb](id));
    if (!confirmed) return;
    try {
      const answer = await api(`/api/episodes/${encodeURIComponent(id)}/${verb}`, {
        method: 'POST',
        body: confirmed,
      });
      state.note = { id, endBefore, ended: false };
      if (verb === 'cancel') result.textContent = CANCEL_SAYS[answer.result] || answer.result;
      else if (verb === 'archive')
        result.textContent =
          answer.result === 'archived' ? 'archived: its dedupe key is free' : 'already archived';
      else if (answer.result === 'resumed')
        result.textContent = 'resumed from its journal: the next node free to run it takes it now';
      // No episode yet when the retry waits (a deferred trigger request, say): its dedupe key still finds it.
      else if (!answer.episode)
        result.textContent = `retry ${answer.dispatch || 'accepted'}, dedupe key ${answer.dedupeKey}`;
      else {
        const open = (ev) => (ev.preventDefault(), openEpisode(answer.episode.id));
        const link = el(
          'a',
          { href: '#', 'data-testid': 'retry-new-episode', onclick: open },
          answer.episode.id,
        );
        result.replaceChildren(
          'new episode ',
          link,
          ` (${answer.episode.status}), dedupe key ${answer.dedupeKey}`,
        );
      }
      clearProblem();
      await refresh();
    } catch (error) {
      result.textContent = `${verb} refused: ${error.message}`;
    }
  }

  // --- bulk actions on the filtered set -------------------------------------------------------

  const BULK_LIMIT = 100;

  /** Retry all matching when the filter names a failed status; cancel all when a live one. */
  function showBulk() {
    const status = state.filters.status;
    $('bulk-retry').hidden = !RETRYABLE.includes(status);
    $('bulk-cancel').hidden = !CANCELLABLE.includes(status);
  }

  function filterText() {
    return Object.entries(state.filters)
      .map(([name, value]) => `${name} ${value}`)
      .join(', ');
  }

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
        body: { ...state.filters, limit: BULK_LIMIT, ...confirmed },
      });
      const done = Object.entries(answer.done || {})
        .filter(([, n]) => n > 0)
        .map(([result, n]) => `${n} ${result.replace(/_/g, ' ')}`)
        .join(', ');
      const refused = answer.refused || [];
      const first = refused[0];
      out.textContent =
        `${verb}: ${answer.matched} matched${done ? `; ${done}` : ''}` +
        (first ? `; ${refused.length} refused (${short(first.message || first.reason, 80)})` : '') +
        (answer.more ? `; more match: run it again for the next ${BULK_LIMIT}` : '');
      clearProblem();
      await refresh();
    } catch (error) {
      out.textContent = `${verb} refused: ${error.message}`;
    }
  }

  // --- lists at the bottom ----------------------------------------------------------------------

  // Secondary lists: one that fails says so in its own place and leaves the rest of the page live.
  async function refreshList(path, testid) {
    const box = $(testid);
    try {
      box.replaceChildren(genericTable((await api(path)).items, `${testid}-table`));
    } catch (error) {
      box.replaceChildren(el('p', { class: 'error' }, `could not load: ${error.message}`));
    }
  }

  // --- the last hour ---------------------------------------------------------------------------

  // An hour's chart moves by the minute: read at most this often, however fast the page refreshes.
  const HISTORY_MS = 12000;

  async function refreshHistory() {
    if (state.historyAt && Date.now() - state.historyAt < HISTORY_MS) return;
    state.historyAt = Date.now();
    const box = $('history');
    try {
      const { buckets } = await api('/api/history?minutes=60');
      const sum = (key) => buckets.reduce((n, b) => n + b[key], 0);
      $('history-total').textContent =
        `${sum('done')} done, ${sum('failed') + sum('partiallyFailed')} failed, ` +
        `${sum('canceled')} canceled`;
      box.replaceChildren(globalThis.CycliumCharts.finishedPerMinute(buckets));
    } catch (error) {
      // Read again at the next refresh, not in 12 s.
      state.historyAt = null;
      box.replaceChildren(el('p', { class: 'error' }, `could not load: ${error.message}`));
    }
  }

  // Flow control (flow.js).
  const flow = globalThis.CycliumFlow.create({ $, el, api, badge, time, ago, fill });

  // --- actors: pause and resume cluster-wide ---------------------------------------------------

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
      void refresh();
    } catch (error) {
      result.textContent = `${verb} refused: ${error.message}`;
    }
  }

  function actorRow(a) {
    const state = a.paused
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
      el('td', { 'data-testid': 'actor-state' }, state),
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
      const open = (e) => (e.preventDefault(), openEpisode(answer.episode.id));
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
      void refresh();
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
      box.replaceChildren(el('p', { class: 'error' }, `could not load: ${error.message}`));
    }
  }

  // --- versions ---------------------------------------------------------------------------------

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
      void refresh();
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
                ...['expectation', 'version', 'in flight', 'nodes', ''].map((h) => el('th', {}, h)),
              ),
              ...items.map(versionRow),
            )
          : el('p', { class: 'muted' }, 'no episode in flight is pinned to a version'),
      );
    } catch (error) {
      box.replaceChildren(el('p', { class: 'error' }, `could not load: ${error.message}`));
    }
  }

  const refreshLists = () =>
    Promise.all([
      refreshActors(),
      refreshHistory(),
      flow.refresh(),
      refreshVersions(),
      refreshList('/api/trigger-requests?limit=20', 'trigger-requests'),
      workflows.refresh(),
    ]);

  // The workflow instances, their detail and step graph (workflows.js, workflow-graph.js).
  const workflows = globalThis.CycliumWorkflows.create({
    $,
    el,
    api,
    badge,
    time,
    scope,
    confirmAction,
    openEpisode,
    showProblem,
    writeUrl,
    refresh,
  });

  // --- refresh loop -----------------------------------------------------------------------------

  /** One refresh at a time; a click during one (a filter, a page, an action) gets a fresh one right after. */
  async function refresh() {
    if (state.busy) return void (state.again = true);
    state.busy = true;
    document.body.toggleAttribute('data-refreshing', true);
    try {
      const [node, cluster, episodes] = await Promise.all([
        api('/api/node'),
        api('/api/cluster'),
        loadEpisodes(),
      ]);
      renderNode(node);
      renderCluster(cluster);
      // Under the pointer the rows hold still (a click must land on the row it aimed at); they
      // catch up when it leaves.
      if (state.hovering) state.heldPage = episodes;
      else renderEpisodes(episodes);
      state.listDrawn = true;
      $('episodes-held').hidden = !state.hovering;
      const selected = state.selected;
      if (selected)
        renderSelected(selected, await api(`/api/episodes/${encodeURIComponent(selected)}`));
      if (state.scrollAgain && selected && !$('episode-detail').hidden) scrollToDetail();
      await refreshLists();
      clearProblem();
      state.refreshedAt = new Date();
      $('refreshed-at').textContent = `updated ${state.refreshedAt.toLocaleTimeString()}`;
    } catch (error) {
      showProblem(error);
    } finally {
      state.busy = false;
      document.body.toggleAttribute('data-refreshing', false);
      if (state.again) {
        state.again = false;
        void refresh();
      }
    }
  }

  /** One pulse at a time; a 503 says the database is away at once, a hang shows by watchSlow. */
  function pulse() {
    const next = () => setTimeout(pulse, PULSE_MS);
    if (!state.live || document.hidden) return void next();
    api('/api/pulse', { pulse: true }).then(
      () => {
        // Only the pulse's own problem clears here: a refresh's error stays until a refresh works.
        const banner = $('banner');
        if (!banner.hidden && banner.dataset.kind === 'slow' && !state.pending.size) clearProblem();
        next();
      },
      (error) => {
        showProblem(error);
        next();
      },
    );
  }

  function tick() {
    const next = () => setTimeout(tick, POLL_MS);
    if (state.live && !document.hidden) refresh().then(next, next);
    else next();
  }

  function wire() {
    const on = (testid, event, handler) => $(testid).addEventListener(event, handler);
    const reload = () => void refresh();
    on('live-toggle', 'change', (ev) => (state.live = ev.target.checked) && reload());
    on('mode-select', 'change', (ev) => (ev.target.dataset.touched = '1'));
    on('mode-apply', 'click', () => void applyMode().then(refresh));
    on('episode-filters', 'submit', (ev) => (ev.preventDefault(), void find().then(reload)));
    on('episodes-table', 'mouseenter', () => (state.hovering = true));
    on('episodes-table', 'mouseleave', () => {
      state.hovering = false;
      $('episodes-held').hidden = true;
      if (state.heldPage) renderEpisodes(state.heldPage);
      state.heldPage = null;
    });
    on('filter-clear', 'click', () => ($('episode-filters').reset(), readFilters(), reload()));
    on(
      'episodes-older',
      'click',
      () => state.nextCursor && (state.cursors.push(state.nextCursor), reload()),
    );
    on('episodes-newest', 'click', () => ((state.cursors = [null]), reload()));
    on('detail-close', 'click', closeEpisode);
    on('bulk-retry', 'click', () => void actOnMatching('retry'));
    on('start-form', 'submit', (ev) => void startEpisode(ev));
    on('bulk-cancel', 'click', () => void actOnMatching('cancel'));
    on('cancel-button', 'click', () => void act('cancel'));
    on('retry-button', 'click', () => void act('retry'));
    on('archive-button', 'click', () => void act('archive'));
    workflows.wire();
  }

  function start() {
    wire();
    readUrl();
    setInterval(watchSlow, 250);
    tick();
    pulse();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
