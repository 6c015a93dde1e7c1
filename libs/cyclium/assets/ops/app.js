// The operations page: plain browser JavaScript over the module's JSON API, no framework, no build.
// Every value from the server reaches the DOM as text (textContent), never as markup. This file
// holds the page together (this node, the cluster, the banner, the refresh loop and the page's
// address); each part of the page has a file of its own, loaded before this one.
'use strict';

(function () {
  const { $, el, apiClient, ago, time, badge, scope, genericTable, fill, loadFailed } =
    globalThis.CycliumPageKit;
  const { HEALTH_SAYS } = globalThis.CycliumEpisodeWords;
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

  const state = {
    live: true,
    busy: false,
    again: false,
    node: null,
    // identity -> live | suspect | stale, from the last cluster read: marks runs of a silent node.
    nodeHealth: new Map(),
    // Requests on their way (start times), and when data last arrived whole.
    pending: new Set(),
    refreshedAt: null,
    // When the chart of the last hour was last read (Date.now()), null to read it at once.
    historyAt: null,
  };

  const api = apiClient(BASE, state.pending);

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

  /** A node's last recovery sweep, and what it did. */
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
      box.replaceChildren(loadFailed(error));
    }
  }

  // The parts of the page, each in its own file; they call back into the refresh loop below.
  const detail = globalThis.CycliumEpisodeDetail.create({
    api,
    showProblem,
    clearProblem,
    writeUrl,
    refresh,
    listDrawn: () => list.drawn(),
  });
  const list = globalThis.CycliumEpisodeList.create({
    api,
    detail,
    nodeHealth: (identity) => state.nodeHealth.get(identity),
    clearProblem,
    writeUrl,
    refresh,
  });
  const actors = globalThis.CycliumActors.create({ api, openEpisode: detail.open, refresh });
  const versions = globalThis.CycliumVersions.create({ api, refresh });
  const flow = globalThis.CycliumFlow.create({ api });
  const workflows = globalThis.CycliumWorkflows.create({
    api,
    openEpisode: detail.open,
    showProblem,
    writeUrl,
    refresh,
  });

  // Secondary lists: one that fails says so in its own place and leaves the rest of the page live.
  async function refreshList(path, testid) {
    const box = $(testid);
    try {
      box.replaceChildren(genericTable((await api(path)).items, `${testid}-table`));
    } catch (error) {
      box.replaceChildren(loadFailed(error));
    }
  }

  const refreshLists = () =>
    Promise.all([
      actors.refresh(),
      refreshHistory(),
      flow.refresh(),
      versions.refresh(),
      refreshList('/api/trigger-requests?limit=20', 'trigger-requests'),
      workflows.refresh(),
    ]);

  // --- the page's address -----------------------------------------------------------------------

  /**
   * The filters, the episode and the workflow instance shown, into the address (other parameters,
   * like pageSize, kept).
   */
  function writeUrl() {
    const params = new URLSearchParams(location.search);
    for (const name of ['episode', 'workflow']) params.delete(name);
    list.toUrl(params);
    if (detail.selected()) params.set('episode', detail.selected());
    if (workflows.selected()) params.set('workflow', workflows.selected());
    const search = params.toString();
    history.replaceState(null, '', `${location.pathname}${search ? `?${search}` : ''}`);
  }

  /** A shared link: its filters into the form, its workflow instance and episode opened. */
  function readUrl() {
    const params = new URLSearchParams(location.search);
    list.fromUrl(params);
    const episode = params.get('episode');
    const workflow = params.get('workflow');
    if (workflow) void workflows.open(workflow);
    if (episode) void detail.open(episode);
  }

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
        list.load(),
      ]);
      renderNode(node);
      renderCluster(cluster);
      list.show(episodes);
      await detail.refresh();
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
    list.wire();
    detail.wire();
    actors.wire();
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
