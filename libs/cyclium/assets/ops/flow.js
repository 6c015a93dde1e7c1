// The operations page's flow control section: each limited expectation's limits, its running and
// waiting work per key, and its rate window. Kept out of app.js, which hands over its API client.
'use strict';

(function () {
  const { $, el, badge, time, ago, fill, loadFailed } = globalThis.CycliumPageKit;

  /** `page`: the API client. */
  function create(page) {
    const { api } = page;

    function period(ms) {
      if (ms % 3600000 === 0) return `${ms / 3600000} h`;
      if (ms % 60000 === 0) return `${ms / 60000} min`;
      if (ms % 1000 === 0) return `${ms / 1000} s`;
      return `${ms} ms`;
    }

    /** "7 / 10 per 1 s", and when the window is full, when its oldest start leaves it. */
    function rateText(starts, rate, freesAt) {
      const text = `${starts} / ${rate.limit} per ${period(rate.periodMs)}`;
      return starts >= rate.limit && freesAt ? `${text}, full: frees ${ago(freesAt)}` : text;
    }

    /** One limited expectation: its limits, its totals, and its busiest keys. */
    function flowExpectation(f) {
      const c = f.concurrency;
      const limits = [
        c
          ? `concurrency ${c.limit}${c.keyed ? ' per key' : ''}${c.total ? `, ${c.total} in all` : ''}`
          : null,
        f.rate
          ? `rate ${f.rate.limit} per ${period(f.rate.periodMs)}${f.rate.keyed ? ' per key' : ''}`
          : null,
      ].filter(Boolean);
      const cap = c ? (c.keyed ? c.total : c.limit) : null;
      const totals = [
        `running ${f.running}${cap ? ` / ${cap}` : ''}`,
        `waiting ${f.waiting}`,
        f.oldestWaitingAt ? `oldest queued ${ago(f.oldestWaitingAt)}` : null,
        f.rate && !f.rate.keyed
          ? `rate window ${rateText(f.rate.starts, f.rate, f.rate.keys[0]?.freesAt)}`
          : null,
        `${f.keyCount} key${f.keyCount === 1 ? '' : 's'}`,
      ].filter(Boolean);
      const keyCell = (key) =>
        key === '' ? el('span', { class: 'muted' }, '(no key)') : el('code', {}, key);
      const keyRows = f.keys.map((k) =>
        el(
          'tr',
          { 'data-testid': 'flow-key', 'data-key': k.key },
          el('td', {}, keyCell(k.key)),
          el(
            'td',
            { class: 'num' },
            c && c.keyed ? `${k.running} / ${c.limit}` : k.running,
            c && k.running >= c.limit ? [' ', badge('full')] : null,
          ),
          el('td', { class: 'num' }, k.waiting ? [badge('throttled'), ` ${k.waiting}`] : 0),
          el('td', {}, time(k.oldestWaitingAt)),
        ),
      );
      if (f.otherKeys) {
        const o = f.otherKeys;
        keyRows.push(
          el(
            'tr',
            { 'data-testid': 'flow-others' },
            el('td', { class: 'muted' }, `${o.keys} other keys`),
            el('td', { class: 'num' }, o.running),
            el('td', { class: 'num' }, o.waiting),
            el('td', {}, time(o.oldestWaitingAt)),
          ),
        );
      }
      const keyTable = el(
        'table',
        { 'data-testid': 'flow-keys' },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ...['Key', 'Running', 'Waiting', 'Oldest waiting'].map((h) => el('th', {}, h)),
          ),
        ),
        el('tbody', {}),
      );
      fill(keyTable.tBodies[0], keyRows, 'nothing running or waiting', 4);
      let rateTable = null;
      if (f.rate && f.rate.keyed) {
        const rate = f.rate;
        const rows = rate.keys.map((k) =>
          el(
            'tr',
            { 'data-testid': 'flow-rate-key', 'data-key': k.key },
            el('td', {}, keyCell(k.key)),
            el('td', {}, rateText(k.starts, rate, k.freesAt)),
          ),
        );
        if (rate.otherKeys)
          rows.push(
            el(
              'tr',
              {},
              el('td', { class: 'muted' }, `${rate.otherKeys.keys} other keys`),
              el('td', {}, `${rate.otherKeys.starts} starts`),
            ),
          );
        rateTable = el(
          'table',
          { 'data-testid': 'flow-rate' },
          el('thead', {}, el('tr', {}, el('th', {}, 'Rate key'), el('th', {}, 'Starts in window'))),
          el('tbody', {}),
        );
        fill(rateTable.tBodies[0], rows, 'no starts in the window', 2);
      }
      return el(
        'div',
        {
          class: 'flow-expectation',
          'data-testid': 'flow-expectation',
          'data-actor': f.actorId,
          'data-expectation': f.expectationId,
        },
        el(
          'h3',
          {},
          el('code', {}, `${f.actorId}.${f.expectationId}`),
          el('span', { class: 'muted small' }, ` ${limits.join('; ')}`),
        ),
        el('p', { 'data-testid': 'flow-totals', class: 'small' }, totals.join(' · ')),
        keyTable,
        rateTable,
      );
    }

    async function refreshFlow() {
      const box = $('flow');
      try {
        const flow = await api('/api/flow');
        box.replaceChildren(
          ...(flow.expectations.length
            ? flow.expectations.map(flowExpectation)
            : [el('p', { class: 'muted' }, 'no expectation with a concurrency or rate limit')]),
        );
      } catch (error) {
        box.replaceChildren(loadFailed(error));
      }
    }

    return { refresh: refreshFlow };
  }

  globalThis.CycliumFlow = { create };
})();
