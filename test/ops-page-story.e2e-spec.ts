import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Browser, Page } from 'playwright-core';
import { useDatabase } from './support/database.js';
import { startNode } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { episodeOf, holdRequests, launchChromium, publishEvent } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

const BEAT_MS = 5_000;
/**
 * A beat of 5 s keeps a killed node `suspect` (its beat late: 6 s) for 4 s before it is `stale`
 * (10 s), twice the page's 2 s refresh, so the page is sure to show it suspect. Leases of 30 s
 * keep its run where it was while the page is looked at: no takeover before the checks. A retry's
 * wake-up is taken by a trigger poll: every 0.5 s, not the library's 5 s, so backoffs of 0.1 s
 * and 0.2 s are not waited out a poll each.
 */
const ENV = {
  DEMO_NODE_BEAT_MS: String(BEAT_MS),
  DEMO_LEASE_SECONDS: '30',
  DEMO_JITTER_MS: '0',
  DEMO_ADVISOR_EVERY: '1h',
  DEMO_RETRY_INITIAL_MS: '100',
  DEMO_TRIGGER_POLL_MS: '500',
  DEMO_DB_POOL: '4',
};

interface Episode {
  id: string;
  status: string;
  ownerNode: string | null;
  finishedAt: string | null;
}

/**
 * What an operator reads off the page about one episode and about the cluster, in a 1440×900
 * window: an episode's attempts, retries and the step that failed, reached by a link; a node that
 * stopped beating; a database that stopped answering. Two demo nodes reach the database through a
 * TCP proxy the test can freeze.
 */
describe('the operations page tells the story of an episode and of the cluster', () => {
  const database = useDatabase();
  let proxy: TcpProxy;
  const nodes: DemoNode[] = [];
  let browser: Browser | undefined;
  let page: Page;

  const [first] = [() => nodes[0] as DemoNode];
  const ops = <T>(path: string) => first().get<T>(`/ops/api${path}`);
  const publish = (type: string, payload: object, node = first()) =>
    publishEvent(node.port, type, payload);
  const statusOf = async (id: string) =>
    (await ops<{ episode: Episode }>(`/episodes/${id}`)).episode;
  const text = async (testid: string, scope: Page | ReturnType<Page['locator']> = page) =>
    ((await scope.getByTestId(testid).first().textContent()) ?? '').trim();
  const pageShows = (what: string, probe: () => Promise<boolean>, ms = 15_000) =>
    waitFor(what, probe, ms, 50);
  const row = (id: string) => page.locator(`[data-testid="episode-row"][data-episode-id="${id}"]`);

  beforeAll(async () => {
    proxy = await TcpProxy.start({ target: database.url });
    const url = proxy.url(database.url);
    const launching = launchChromium();
    const started = await Promise.allSettled([
      startNode(url, 'story-1', ENV),
      startNode(url, 'story-2', ENV),
    ]);
    for (const s of started) if (s.status === 'fulfilled') nodes.push(s.value);
    browser = await launching;
    for (const s of started) if (s.status === 'rejected') throw s.reason;
    page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(15_000);
  });

  afterAll(async () => {
    proxy?.thaw();
    await browser?.close();
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    await proxy?.close();
  });

  it('shows a failed-after-retries episode by its link: each attempt, the step that threw and its error, in view without scrolling', async () => {
    // Step 2 ("drain") throws on every attempt; its retry policy allows three.
    const eventId = await publish('resource.rebalance_retried', {
      resource: 'rack-story',
      stepMs: 10,
      failAtStep: 2,
    });
    const failed = await episodeOf<Episode>(first(), eventId);
    await waitFor('the third attempt to fail', async () =>
      (await statusOf(failed.id)).status === 'failed' ? true : undefined,
    );
    // Filler below it: the table is long, the detail must still come into view.
    for (let i = 0; i < 20; i += 1)
      await publish('resource.updated', { resource: `f-${i}`, usage: 1 });

    await page.goto(`http://127.0.0.1:${first().port}/ops?episode=${failed.id}`);
    await pageShows(
      'the linked episode to open',
      async () => (await text('detail-id')) === failed.id,
    );
    await pageShows(
      'its journal to load',
      async () => (await page.getByTestId('step-row').count()) > 0,
    );
    // In view below the sticky header: the title is not hidden behind it, nor below the window.
    const header = await page.locator('header.top').boundingBox();
    const title = await page.getByTestId('detail-id').boundingBox();
    expect(header && title).toBeTruthy();
    expect(title!.y).toBeGreaterThanOrEqual(header!.y + header!.height);
    expect(title!.y + title!.height).toBeLessThanOrEqual(900);

    expect(await text('detail-status')).toBe('failed');
    expect(await text('detail-attempt')).toBe('3 of 3 (its retry policy)');
    expect(await text('detail-failed-step')).toBe('step 2 "drain"');
    const steps = await page.getByTestId('step-row').evaluateAll((rows) =>
      rows.map((r) => ({
        kind: r.getAttribute('data-kind'),
        name: r.children[2]?.textContent,
        error: r.querySelector('[data-testid="step-error"]')?.textContent ?? '',
      })),
    );
    // plan once (replayed after); two retries, each with its attempt's error; then the failure,
    // which no journal row holds (only completed steps are journaled).
    const failing = steps.filter((s) => s.error !== '');
    expect(failing.map((s) => s.name)).toEqual(['retry', 'retry', 'drain']);
    for (const s of failing.slice(0, 2))
      expect(s.error).toContain('crash: in step 2 "drain": drain failed on purpose');
    expect(failing[2]?.error).toBe('crash: drain failed on purpose (failAtStep 2)');
    expect(steps.at(-1)?.kind).toBe('failed');
    expect(steps.filter((s) => s.name === 'plan')).toHaveLength(1);

    // Its timeline on one axis: the step that ran, each retry and wake-up (with the node that
    // went on), the two backoffs waited out between them, and the end.
    const timeline = page.getByTestId('episode-timeline');
    expect(await timeline.getByTestId('timeline-step').count()).toBe(1);
    const marks = await timeline
      .getByTestId('timeline-mark')
      .evaluateAll((g) => g.map((m) => m.getAttribute('data-name')));
    expect(marks).toEqual(['retry', 'woken', 'retry', 'woken']);
    expect(await timeline.getByTestId('timeline-wait').count()).toBe(2);
    expect(await timeline.getByTestId('timeline-end').getAttribute('data-status')).toBe('failed');
    expect(await timeline.textContent()).toMatch(/woken · story-[12]/);

    // The table says which attempt it ended on, and it is no wider than the window.
    await pageShows('its row', async () => (await row(failed.id).count()) === 1);
    expect(await text('episode-attempt', row(failed.id))).toBe('3 of 3');
    expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(
      1440,
    );

    // Retried from the page, it fails again: the answer then says so, instead of staying stale. The
    // answer reaches the page only once the episode has failed again, an end the note still counts.
    const endedBefore = (await statusOf(failed.id)).finishedAt;
    await page.route(`**/api/episodes/${failed.id}/retry`, async (route) => {
      const response = await route.fetch();
      await waitFor('the resumed episode to fail again', async () => {
        const episode = await statusOf(failed.id);
        return episode.status === 'failed' && episode.finishedAt !== endedBefore;
      });
      await route.fulfill({ response });
    });
    await page.getByTestId('retry-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows('the resume to be acknowledged', async () =>
      (await text('action-result')).startsWith('resumed from its journal'),
    );
    await pageShows(
      'the note to say it ended failed since',
      async () => (await page.getByTestId('action-since').count()) === 1,
      30_000,
    );
    expect(await text('action-since')).toBe('; since then it ended failed');
    // The address still names it: a reload shows the same episode.
    expect(new URL(page.url()).searchParams.get('episode')).toBe(failed.id);

    // Archived, it has no journal to resume from: a retry starts a new episode, and the answer's
    // link opens that one in place.
    await page.getByTestId('archive-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows('the archive to be acknowledged', async () =>
      (await text('action-result')).startsWith('archived'),
    );
    await pageShows('the retry to say it starts anew', async () =>
      (await text('retry-note')).startsWith('starts a new episode'),
    );
    await page.getByTestId('retry-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows(
      'a link to the new episode',
      async () => (await page.getByTestId('retry-new-episode').count()) === 1,
    );
    const retried = await text('retry-new-episode');
    expect(retried).not.toBe(failed.id);
    await page.getByTestId('retry-new-episode').click();
    await pageShows('the new episode on screen', async () => (await text('detail-id')) === retried);
    expect(new URL(page.url()).searchParams.get('episode')).toBe(retried);
  });

  it('finds an episode by its id, its dedupe key or its event id, and holds the rows still under the pointer', async () => {
    const eventId = await publish('resource.updated', { resource: 'findable', usage: 1 });
    const found = await episodeOf<Episode>(first(), eventId);
    const { episode } = await ops<{ episode: { dedupeKey: string } }>(`/episodes/${found.id}`);
    await page.goto(`http://127.0.0.1:${first().port}/ops`);
    const search = async (text: string) => {
      await page.getByTestId('filter-find').fill(text);
      await page.getByTestId('filter-apply').click();
    };
    const shown = () =>
      page
        .locator('[data-testid="episode-row"]')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-episode-id')));
    // Its id opens it (and names it in the address).
    await search(found.id);
    await pageShows('it opened', async () => (await text('detail-id')) === found.id);
    expect(new URL(page.url()).searchParams.get('episode')).toBe(found.id);
    // Its dedupe key, and its event's id, list it alone.
    await page.getByTestId('filter-clear').click();
    await search(episode.dedupeKey);
    await pageShows(
      'only it, by dedupe key',
      async () => JSON.stringify(await shown()) === JSON.stringify([found.id]),
    );
    expect(new URL(page.url()).searchParams.get('dedupeKey')).toBe(episode.dedupeKey);
    await page.getByTestId('filter-clear').click();
    await search(eventId);
    await pageShows(
      'only it, by event id',
      async () => JSON.stringify(await shown()) === JSON.stringify([found.id]),
    );
    // Each row links to its episode.
    expect(await row(found.id).getByTestId('episode-link').getAttribute('href')).toBe(
      `?episode=${found.id}`,
    );

    // With the pointer on the table, a new episode does not push the rows under it.
    await page.getByTestId('filter-clear').click();
    await pageShows('the unfiltered list', async () => (await shown()).length > 1);
    const before = await shown();
    await page.getByTestId('episodes-table').hover();
    const newcomer = await episodeOf<Episode>(
      first(),
      await publish('resource.updated', { resource: 'new', usage: 1 }),
    );
    await pageShows('the table to say it holds still', () =>
      page.getByTestId('episodes-held').isVisible(),
    );
    // A refresh later the rows are where they were.
    const refreshed = await text('refreshed-at');
    await pageShows('a refresh', async () => (await text('refreshed-at')) !== refreshed);
    expect(await shown()).toEqual(before);
    await page.mouse.move(0, 0);
    await pageShows('the newcomer once the pointer left', async () =>
      (await shown()).includes(newcomer.id),
    );
  });

  it('starts an episode from the form, and refuses what the trigger would not take, naming the field', async () => {
    await page.goto(`http://127.0.0.1:${first().port}/ops`);
    const choice = 'resource_monitor.check_resource_limits';
    await pageShows('the form to offer the expectation', async () =>
      (await page.getByTestId('start-expectation').locator('option').allTextContents()).includes(
        choice,
      ),
    );
    await page.getByTestId('start-expectation').selectOption(choice);
    await page.getByTestId('start-payload').fill('[1]');
    await page.getByTestId('start-submit').click();
    await pageShows('the refusal', async () =>
      (await text('start-result')).includes('payload must be a JSON object'),
    );
    await page.getByTestId('start-payload').fill('{"resource": "formed", "usage": 1}');
    await page.getByTestId('start-dedupe').fill('formed-once');
    await page.getByTestId('start-submit').click();
    await pageShows('the new episode linked', () => page.getByTestId('start-episode').isVisible());
    const id = (await text('start-episode')).trim();
    await waitFor('it to end done', async () => (await statusOf(id)).status === 'done');
    // Its dedupe key holds: the same start again is a duplicate.
    await page.getByTestId('start-submit').click();
    await pageShows('a duplicate', async () => (await text('start-result')) === 'duplicate');
    // Over HTTP: an expectation this node does not declare is a 404.
    const unknown = await fetch(`http://127.0.0.1:${first().port}/ops/api/episodes/start`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-cyclium-ops': '1' },
      body: JSON.stringify({ actorId: 'nobody', expectationId: 'nothing' }),
    });
    expect(unknown.status).toBe(404);
  });

  it('says so in its own place when one secondary list fails, and keeps the rest of the page live', async () => {
    const versions = '**/ops/api/versions';
    await page.route(versions, (route) =>
      route.fulfill({ status: 500, json: { statusCode: 500, message: 'versions broke' } }),
    );
    try {
      await pageShows('the failure in its place', async () =>
        (await text('versions')).startsWith('could not load: versions broke'),
      );
      // The refresh still completes around it: the rest of the page moves on.
      const refreshed = await text('refreshed-at');
      await pageShows('a refresh', async () => (await text('refreshed-at')) !== refreshed);
      expect(await page.getByTestId('actors-table').count()).toBe(1);
    } finally {
      await page.unroute(versions);
    }
    await pageShows(
      'the list back',
      async () => !(await text('versions')).startsWith('could not load'),
    );
  });

  it('asks before acting, and Back leaves the episode as it was', async () => {
    const eventId = await publish('resource.rebalance_once', {
      resource: 'rack-ask',
      stepMs: 20_000,
    });
    const running = await episodeOf<Episode>(first(), eventId);
    await page.goto(`http://127.0.0.1:${first().port}/ops?episode=${running.id}`);
    await pageShows('Cancel to be offered', () => page.getByTestId('cancel-button').isVisible());
    await page.getByTestId('cancel-button').click();
    expect(await page.getByTestId('confirm-dialog').isVisible()).toBe(true);
    expect(await text('confirm-question')).toContain(running.id);
    await page.getByTestId('confirm-back').click();
    expect(await page.getByTestId('confirm-dialog').isVisible()).toBe(false);
    expect(await text('action-result')).toBe('');
    expect((await statusOf(running.id)).status).not.toBe('canceled');

    await page.getByTestId('cancel-button').click();
    await page.getByTestId('confirm-ok').click();
    await pageShows('the cancel to take', async () =>
      ['canceled'].includes((await statusOf(running.id)).status),
    );
  });

  it('acts only on the episode on screen: while another one loads, its buttons wait', async () => {
    const [shown, next] = await Promise.all(
      ['rack-shown', 'rack-next'].map(async (resource) =>
        episodeOf<Episode>(
          first(),
          await publish('resource.rebalance_once', { resource, stepMs: 20_000 }),
        ),
      ),
    );
    await page.goto(`http://127.0.0.1:${first().port}/ops?episode=${shown.id}`);
    await pageShows('Cancel to be offered', () => page.getByTestId('cancel-button').isVisible());
    await pageShows('the other episode in the list', () => row(next.id).isVisible());
    // The other episode's detail is held, so the first one's stays on screen meanwhile.
    const release = await holdRequests(page, `**/ops/api/episodes/${next.id}`);
    try {
      await row(next.id).click();
      expect(await text('detail-id')).toBe(shown.id);
      expect(await page.getByTestId('cancel-button').isDisabled()).toBe(true);
    } finally {
      await release();
    }
    await pageShows(
      'the other episode on screen',
      async () => (await text('detail-id')) === next.id,
    );
    await page.getByTestId('cancel-button').click();
    expect(await text('confirm-question')).toContain(next.id);
    await page.getByTestId('confirm-ok').click();
    await pageShows('the cancel to take', async () =>
      ['canceled'].includes((await statusOf(next.id)).status),
    );
    expect((await statusOf(shown.id)).status).not.toBe('canceled');
  });

  it('retries a filtered set of 20 failed episodes with one confirmation, and they run again', async () => {
    const batch = `bulk-${Date.now()}`;
    const ids: string[] = [];
    // Each fails at its first step once, so its resume runs through.
    for (let i = 0; i < 20; i += 1)
      ids.push(
        (
          await episodeOf<Episode>(
            first(),
            await publish('resource.rebalance_once', {
              resource: `${batch}-${i}`,
              stepMs: 10,
              failAtStep: 1,
              failTimes: 1,
            }),
          )
        ).id,
      );
    const all = (status: string) => async () => {
      for (const id of ids) if ((await statusOf(id)).status !== status) return false;
      return true;
    };
    await waitFor('the 20 to fail', all('failed'));
    const failedNow = (
      await ops<{ items: Episode[] }>('/episodes?actor=resource_rebalancer&status=failed&limit=100')
    ).items.length;

    await page.goto(`http://127.0.0.1:${first().port}/ops?actor=resource_rebalancer&status=failed`);
    // The filters came from the address; the set is failed, so the page offers a retry of it all.
    expect(await page.getByTestId('filter-actor').inputValue()).toBe('resource_rebalancer');
    await pageShows('Retry all matching', () => page.getByTestId('bulk-retry').isVisible());
    expect(await page.getByTestId('bulk-cancel').isVisible()).toBe(false);
    await page.getByTestId('bulk-retry').click();
    expect(await text('confirm-question')).toContain('actor resource_rebalancer, status failed');
    await page.getByTestId('confirm-reason').fill('disk replaced');
    await page.getByTestId('confirm-ok').click();
    await pageShows('the answer', async () => (await text('bulk-result')).includes('matched'));
    expect(await text('bulk-result')).toMatch(new RegExp(`^retry: ${failedNow} matched; `));
    expect(await text('bulk-result')).toContain('resumed');
    await waitFor('all 20 to end done', all('done'), 60_000, 200);
    // One confirmation for the lot: the reason is in each resume's journal marker.
    const detail = await ops<{ steps: Array<{ name: string; resultRef: { reason?: string } }> }>(
      `/episodes/${ids[0]}`,
    );
    expect(detail.steps.find((s) => s.name === 'retry')?.resultRef.reason).toBe('disk replaced');
  });

  it('marks a node killed outright suspect within about a beat, and its run with it, in the page and cluster()', async () => {
    const victim = nodes[1] as DemoNode;
    // Started by the victim itself (a manual trigger runs on the node that takes it).
    const response = await fetch(
      `http://127.0.0.1:${victim.port}/actors/resource_rebalancer/rebalance_once`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ payload: { resource: 'rack-kill', stepMs: 20_000 } }),
      },
    );
    const episode = { id: ((await response.json()) as { episodeId: string }).episodeId };
    await waitFor('the victim to run it', async () => {
      const e = await statusOf(episode.id);
      return e.status === 'running' && e.ownerNode === 'story-2';
    });
    await page.goto(`http://127.0.0.1:${first().port}/ops`);
    const victimRow = page.locator('[data-testid="node-row"][data-identity="story-2"]');
    await pageShows(
      'the victim live',
      async () => (await victimRow.getAttribute('data-health')) === 'live',
    );

    victim.process.kill('SIGKILL');
    const killedAt = Date.now();
    await pageShows(
      'the victim suspect',
      async () => (await victimRow.getAttribute('data-health')) === 'suspect',
      BEAT_MS * 3,
    );
    const shownAfterMs = Date.now() - killedAt;
    // At most a beat and a second after its last beat (before the kill), plus the page's refresh
    // (2 s and the time a refresh takes on a loaded machine).
    expect(shownAfterMs).toBeLessThanOrEqual(BEAT_MS + 1_000 + 3_000);
    await pageShows(
      'its run marked',
      async () => (await text('owner-health', row(episode.id))) === 'node suspect',
    );
    const cluster = await ops<{ nodes: Array<{ identity: string; health: string }> }>('/nodes');
    expect(cluster.nodes.find((n) => n.identity === 'story-2')?.health).toMatch(/suspect|stale/);
    expect(cluster.nodes.find((n) => n.identity === 'story-1')?.health).toBe('live');
    process.stdout.write(
      `killed node shown suspect after ${shownAfterMs} ms (beat ${BEAT_MS} ms)\n`,
    );
    await pageShows(
      'then stale',
      async () => (await victimRow.getAttribute('data-health')) === 'stale',
      BEAT_MS * 3,
    );
  });

  it('says within 2 s of a freeze that the database stopped answering, and clears it after', async () => {
    await page.goto(`http://127.0.0.1:${first().port}/ops`);
    await pageShows('a first refresh', async () =>
      (await text('refreshed-at')).startsWith('updated'),
    );
    proxy.freeze();
    const frozenAt = Date.now();
    try {
      await pageShows(
        'the banner',
        async () =>
          (await page.getByTestId('banner').isVisible()) &&
          (await text('banner')).includes('no answer'),
        10_000,
      );
      const shownAfterMs = Date.now() - frozenAt;
      process.stdout.write(`banner shown ${shownAfterMs} ms after the freeze\n`);
      // The page's pulse asks every 0.5 s and speaks up 1 s into a wait.
      expect(shownAfterMs).toBeLessThanOrEqual(2_000);
      expect(await text('banner')).toMatch(/the data below is from/);
      expect(await page.evaluate<boolean>("document.body.classList.contains('stale')")).toBe(true);
    } finally {
      proxy.thaw();
    }
    await pageShows(
      'the banner to go after the thaw',
      async () => !(await page.getByTestId('banner').isVisible()),
      30_000,
    );
  });
});
