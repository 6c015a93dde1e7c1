import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Page } from 'playwright-core';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';
import { episodeOf, OpsBrowserRig, publishEvent } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

// The advisor's schedule would add an episode a minute: the tables hold only what the tests cause.
const NODE_ENV = { CYCLIUM_NODE_ID: 'ops-1', DEMO_JITTER_MS: '0', DEMO_ADVISOR_EVERY: '1h' };

/**
 * Pauses a page's installed fake clock a little ahead of its own time. The page's clock runs on
 * between reading it and pausing it; on a loaded machine that gap has exceeded the margin, and
 * Playwright refuses to pause in the past, so a refused pause is tried again from a fresh reading.
 */
async function pauseSoon(target: Page): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    const now = await target.evaluate(() => Date.now());
    try {
      await target.clock.pauseAt(now + 250);
      return;
    } catch (error) {
      if (attempt >= 5 || !String(error).includes('to the past')) throw error;
    }
  }
}

interface Episode {
  id: string;
  status: string;
  dedupeKey: string;
}

/**
 * The operations page of a real demo node, driven in headless Chromium (shipped inside
 * @sparticuz/chromium, so `npm install` alone brings it). Every check reads the page as an operator
 * would: rows appear by the page's own live refresh, never by a reload.
 */
describe('the operations page in a browser', () => {
  const database = useDatabase();
  let node: DemoNode;
  let page: Page;
  const rig = new OpsBrowserRig<DemoNode>();

  const ops = <T>(path: string) => node.get<T>(`/ops/api${path}`);
  const publish = (type: string, payload: object) => publishEvent(node.port, type, payload);
  const row = (id: string) => page.locator(`[data-testid="episode-row"][data-episode-id="${id}"]`);
  const text = async (testid: string) =>
    ((await page.getByTestId(testid).textContent()) ?? '').trim();
  const pageShows = (what: string, probe: () => Promise<boolean>) =>
    waitFor(what, probe, 15_000, 100);

  beforeAll(async () => {
    ({ node, page } = await rig.start(startDemoNode(database.url, NODE_ENV)));
    await page.goto(`http://127.0.0.1:${node.port}/ops`);
  });

  afterAll(() => rig.close({ screenshot: 'ops-page.png' }));

  it("shows the node it is on, its mode, and the cluster's nodes", async () => {
    await pageShows(
      'the header to name the node',
      async () => (await text('node-identity')) === 'ops-1',
    );
    expect(await text('node-mode')).toBe('full');
    const nodeRow = page.locator('[data-testid="node-row"][data-identity="ops-1"]');
    await nodeRow.waitFor({ timeout: 15_000 });
    expect(await nodeRow.textContent()).toContain('live');
  });

  it('shows an episode after POST /events by its live refresh, and opens its journal', async () => {
    // Markup in the data stays text: the summary and the finding carry the resource's name.
    const eventId = await publish('resource.updated', {
      resource: '<b>db-7</b>',
      usage: 97,
      limit: 90,
    });
    const episode = await episodeOf<Episode>(node, eventId);
    await row(episode.id).waitFor({ timeout: 15_000 });
    await pageShows(
      'the episode to show done',
      async () => (await row(episode.id).getAttribute('data-status')) === 'done',
    );
    expect(await row(episode.id).textContent()).toContain('<b>db-7</b> breached its limit');
    expect(await page.locator('[data-testid="episodes-table"] b').count()).toBe(0);

    // The event id filter finds the episodes an event caused.
    await publish('resource.updated', { resource: 'db-8', usage: 10 });
    await page.getByTestId('filter-event').fill(eventId);
    await page.getByTestId('filter-apply').click();
    await pageShows("the table to hold that event's episode only", async () => {
      const ids = await page
        .locator('[data-testid="episode-row"]')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-episode-id')));
      return ids.length === 1 && ids[0] === episode.id;
    });
    await page.getByTestId('filter-clear').click();

    await row(episode.id).click();
    await page.getByTestId('episode-detail').waitFor({ state: 'visible' });
    expect(await text('detail-id')).toBe(episode.id);
    expect(await text('detail-status')).toBe('done');
    const steps = page.locator('[data-testid="step-row"]');
    await pageShows('the journal to list the step', async () => (await steps.count()) > 0);
    expect(await steps.first().textContent()).toContain('evaluate');
    expect(await page.getByTestId('detail-findings').textContent()).toContain(
      'limit_breach:<b>db-7</b>',
    );
    // A finished episode offers neither action.
    expect(await page.getByTestId('cancel-button').isVisible()).toBe(false);
    expect(await page.getByTestId('retry-button').isVisible()).toBe(false);
  });

  it('cancels a running rebalancer from the page and shows it end canceled', async () => {
    const eventId = await publish('resource.rebalance_once', { resource: 'rack-3', stepMs: 3_000 });
    const episode = await episodeOf<Episode>(node, eventId);
    await pageShows(
      'the rebalancer to show running',
      async () => (await row(episode.id).getAttribute('data-status')) === 'running',
    );
    await row(episode.id).click();
    await pageShows(
      'the detail to offer Cancel',
      async () =>
        (await text('detail-id')) === episode.id && page.getByTestId('cancel-button').isVisible(),
    );

    await page.getByTestId('cancel-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows('the cancel to be acknowledged', async () =>
      /cancel requested|canceled/.test(await text('action-result')),
    );
    await pageShows(
      'the detail to show canceled',
      async () => (await text('detail-status')) === 'canceled',
    );
    await pageShows(
      'the table to show canceled',
      async () => (await row(episode.id).getAttribute('data-status')) === 'canceled',
    );
    expect(await page.getByTestId('cancel-button').isVisible()).toBe(false);
    expect((await ops<{ episode: Episode }>(`/episodes/${episode.id}`)).episode.status).toBe(
      'canceled',
    );
  });

  it('pages to older episodes by keyset and back to the newest', async () => {
    // Three so far (two checks and the canceled rebalancer): pages of two hold two, then one.
    const newest = (await ops<{ items: Episode[] }>('/episodes?limit=3')).items.map((e) => e.id);
    expect(newest).toHaveLength(3);
    const shown = () =>
      page
        .locator('[data-testid="episode-row"]')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-episode-id')));
    const showing = (what: string, ids: string[]) =>
      pageShows(what, async () => JSON.stringify(await shown()) === JSON.stringify(ids));
    await page.goto(`http://127.0.0.1:${node.port}/ops?pageSize=2`);
    await showing('the newest two', newest.slice(0, 2));
    await page.getByTestId('episodes-older').click();
    await showing('the one before them', newest.slice(2, 3));
    await page.getByTestId('episodes-newest').click();
    await showing('the newest two again', newest.slice(0, 2));
    await page.goto(`http://127.0.0.1:${node.port}/ops`);
  });

  it('says the database is unavailable while the API answers 503, and clears it by itself', async () => {
    // The API's own 503 is the API test's business (test/ops-api); here the page's answer to one.
    const body = JSON.stringify({ statusCode: 503, message: 'database unavailable' });
    await page.route('**/api/cluster', (route) =>
      route.fulfill({ status: 503, contentType: 'application/json', body }),
    );
    try {
      await pageShows(
        'the banner',
        async () =>
          (await page.getByTestId('banner').isVisible()) &&
          (await text('banner')).includes('database unavailable'),
      );
    } finally {
      await page.unroute('**/api/cluster');
    }
    await pageShows(
      'the banner to go once the API answers again',
      async () => !(await page.getByTestId('banner').isVisible()),
    );
  });

  it('retries a failed episode from the page: it resumes in place from its journal, the steps before the failure not run again', async () => {
    const eventId = await publish('resource.rebalance_once', {
      resource: 'rack-9',
      stepMs: 10,
      failAtStep: 2,
      failTimes: 1,
    });
    const failed = await episodeOf<Episode>(node, eventId);
    await pageShows(
      'the episode to show failed',
      async () => (await row(failed.id).getAttribute('data-status')) === 'failed',
    );
    await row(failed.id).click();
    await pageShows(
      'the detail to offer Retry',
      async () =>
        (await text('detail-id')) === failed.id && page.getByTestId('retry-button').isVisible(),
    );
    expect(await text('detail-error')).toContain('failed on purpose');
    expect(await text('retry-note')).toBe(
      'resumes it from its journal: steps that completed do not run again',
    );

    await page.getByTestId('retry-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows('the resume to be acknowledged', async () =>
      (await text('action-result')).startsWith('resumed from its journal'),
    );
    await pageShows(
      'the detail to show it done',
      async () =>
        (await text('detail-id')) === failed.id && (await text('detail-status')) === 'done',
    );
    const steps = await page
      .locator('[data-testid="step-row"]')
      .evaluateAll((rows) => rows.map((r) => r.children[2]?.textContent));
    // One journal, one `plan`: the resume replayed it rather than running it again.
    expect(steps.filter((name) => name === 'plan')).toHaveLength(1);
    expect(steps).toEqual(expect.arrayContaining(['plan', 'retry', 'drain', 'report']));
    expect((await ops<{ episode: Episode }>(`/episodes/${failed.id}`)).episode.status).toBe('done');

    // Archiving it frees its key; the page says so and stops offering it.
    await row(failed.id).click();
    await pageShows(
      'the detail to offer Archive',
      async () =>
        (await text('detail-id')) === failed.id && page.getByTestId('archive-button').isVisible(),
    );
    expect(await text('archive-note')).toBe('frees its dedupe key now; retention deletes it later');
    await page.getByTestId('archive-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows(
      'the archive to be done',
      async () => (await text('action-result')) === 'archived: its dedupe key is free',
    );
    await pageShows(
      'the detail to show it archived, with no Archive button',
      async () =>
        (await page.getByTestId('detail-archived').isVisible()) &&
        !(await page.getByTestId('archive-box').isVisible()),
    );
    expect(
      (await ops<{ episode: { archivedAt: string | null } }>(`/episodes/${failed.id}`)).episode
        .archivedAt,
    ).not.toBeNull();
  });

  it('shows what a run for later waits for and when it falls due, in the table and the detail', async () => {
    const response = await fetch(
      `http://127.0.0.1:${node.port}/actors/resource_rebalancer/rebalance`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ payload: { resource: 'rack-later' }, delayMs: 600_000 }),
      },
    );
    const { episodeId } = (await response.json()) as { episodeId: string };
    const due = row(episodeId).getByTestId('episode-due');
    await pageShows(
      'the row to say it runs later',
      async () =>
        (await due.count()) === 1 &&
        /^runs later, due in (9|10) min$/.test(((await due.textContent()) ?? '').trim()),
    );
    await row(episodeId).click();
    await pageShows(
      'the detail to say so too',
      async () =>
        (await text('detail-id')) === episodeId &&
        (await text('detail-due')).startsWith('runs later, due in'),
    );
    expect(
      (await ops<{ episode: { waitingFor: string } }>(`/episodes/${episodeId}`)).episode.waitingFor,
    ).toBe('start');
    // Its request is counted among the pending, beside the scheduled wake-ups.
    const counts = async () => {
      const match = /^(\d+) pending, (\d+) scheduled, \d+ expired in the window$/.exec(
        await text('trigger-summary'),
      );
      return match ? { pending: Number(match[1]), scheduled: Number(match[2]) } : undefined;
    };
    await pageShows('the summary to count it pending', async () => (await counts())?.pending === 1);
    await page.getByTestId('cancel-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows(
      'it to end canceled, waiting for nothing',
      async () =>
        (await text('detail-status')) === 'canceled' &&
        (await page.getByTestId('detail-due').count()) === 0,
    );
    // Canceled, its request is no longer pending.
    await pageShows('the summary to drop it', async () => (await counts())?.pending === 0);
  });

  it('pauses its live refresh and resumes it', async () => {
    // A page in a context of its own whose timers the test drives (Playwright's clock), so "no poll
    // while paused" is counted over ten polling periods without sleeping through them. Not closed
    // here: with the single-process Chromium, closing a context ends the browser (afterAll does).
    const paused = await rig.browser!.newPage();
    await paused.addInitScript(() => {
      const page = globalThis as unknown as {
        clusterPolls: number;
        fetch: (input: unknown, init?: unknown) => Promise<unknown>;
      };
      const fetch = page.fetch.bind(page);
      page.clusterPolls = 0;
      page.fetch = (input, init) => {
        if (String(input).endsWith('/api/cluster')) page.clusterPolls += 1;
        return fetch(input, init);
      };
    });
    await paused.clock.install();
    await paused.goto(`http://127.0.0.1:${node.port}/ops`);
    const polls = () =>
      paused.evaluate(() => (globalThis as unknown as { clusterPolls: number }).clusterPolls);
    const idle = () =>
      pageShows(
        'the page to finish refreshing',
        async () => (await paused.locator('body[data-refreshing]').count()) === 0,
      );
    await pageShows(
      'the first load',
      async () => (await paused.getByTestId('refreshed-at').textContent()) !== '',
    );
    await pauseSoon(paused);
    await idle();
    const before = await polls();
    await paused.clock.runFor(2_000);
    expect(await polls()).toBe(before + 1);
    await idle();

    await paused.getByTestId('live-toggle').uncheck();
    await paused.clock.runFor(20_000);
    expect(await polls()).toBe(before + 1);
    await paused.getByTestId('live-toggle').check();
    expect(await polls()).toBe(before + 2);
  });

  it("switches the node's mode from the page and sees it reported, then back to full", async () => {
    for (const mode of ['trigger_only', 'full']) {
      await page.getByTestId('mode-select').selectOption(mode);
      await page.getByTestId('mode-apply').click();
      await pageShows(
        `the header to report ${mode}`,
        async () => (await text('node-mode')) === mode,
      );
      expect(await ops<{ mode: string }>('/mode')).toMatchObject({ mode });
      expect(await ops<{ mode: string }>('/node')).toMatchObject({ mode });
      await pageShows(
        `the nodes table to report ${mode}`,
        async () =>
          (
            await page.locator('[data-testid="node-row"][data-identity="ops-1"]').textContent()
          )?.includes(mode) ?? false,
      );
    }
    expect(rig.pageErrors).toEqual([]);
  });

  it('ran every case above under its Content-Security-Policy without a violation, and cannot be framed', async () => {
    expect(rig.policyViolations).toEqual([]);
    // Left open, as the paused page above is: with this Chromium's single process, closing a page
    // closes the browser (afterAll closes it).
    const framer = await rig.browser!.newPage();
    const refused: string[] = [];
    framer.on('console', (message) => refused.push(message.text()));
    await framer.setContent(
      `<iframe data-testid="framed" src="http://127.0.0.1:${node.port}/ops"></iframe>`,
    );
    await waitFor('Chromium to refuse the frame', async () =>
      refused.some((line) => line.includes("frame-ancestors 'none'")),
    );
    // The frame never got the page: nothing of it can be clicked through an overlay.
    const framed = framer.frames().find((frame) => frame !== framer.mainFrame());
    expect(await framed?.locator('[data-testid="node-mode"]').count()).toBe(0);
  });
});
