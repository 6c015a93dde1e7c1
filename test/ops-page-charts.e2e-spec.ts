import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Page } from 'playwright-core';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';
import { OpsBrowserRig, publishEvent } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

// The advisor's schedule would add an episode a minute: the tables hold only what the tests cause.
const NODE_ENV = { CYCLIUM_NODE_ID: 'charts-1', DEMO_JITTER_MS: '0', DEMO_ADVISOR_EVERY: '1h' };

interface Bucket {
  minute: string;
  done: number;
  failed: number;
  partiallyFailed: number;
  canceled: number;
}

interface History {
  at: string;
  minutes: number;
  buckets: Bucket[];
}

interface Episode {
  id: string;
  status: string;
  finishedAt: string | null;
}

const TERMINAL: Record<string, keyof Omit<Bucket, 'minute'>> = {
  done: 'done',
  failed: 'failed',
  partially_failed: 'partiallyFailed',
  canceled: 'canceled',
};

/** The finished episodes of `episodes` counted per minute, as the history should count them. */
function perMinute(episodes: Episode[]): Map<number, Omit<Bucket, 'minute'>> {
  const counts = new Map<number, Omit<Bucket, 'minute'>>();
  for (const e of episodes) {
    const key = TERMINAL[e.status];
    if (!key || !e.finishedAt) continue;
    const minute = Math.floor(Date.parse(e.finishedAt) / 60_000) * 60_000;
    const bucket = counts.get(minute) ?? { done: 0, failed: 0, partiallyFailed: 0, canceled: 0 };
    bucket[key] += 1;
    counts.set(minute, bucket);
  }
  return counts;
}

/**
 * The operations page's "Last hour": `GET /api/history` counts the episodes a real demo node
 * finished, per minute and terminal status, and the page draws them as stacked bars (charts.js)
 * whose counts add up to the API's, refreshed by the page itself.
 */
describe('the operations page: finished episodes over the last hour, as a chart', () => {
  const database = useDatabase();
  let node: DemoNode;
  let page: Page;
  const rig = new OpsBrowserRig<DemoNode>();

  const ops = <T>(path: string) => node.get<T>(`/ops/api${path}`);
  const publish = (type: string, payload: object) => publishEvent(node.port, type, payload);
  /** The episode an event caused, once it has finished. */
  const finished = async (eventId: string): Promise<Episode> => {
    const episode = await waitFor(`the episode of event ${eventId} to finish`, async () => {
      const [caused] = (
        await ops<{ items: Episode[] }>(`/episodes?eventId=${encodeURIComponent(eventId)}`)
      ).items;
      return caused?.finishedAt ? caused : undefined;
    });
    return episode as Episode;
  };
  const allEpisodes = async () => (await ops<{ items: Episode[] }>('/episodes?limit=500')).items;
  /** What the chart on the page holds: its bars, and their counts added up. */
  const chart = () =>
    page.locator('[data-testid="history-bar"]').evaluateAll((bars) => ({
      bars: bars.length,
      done: bars.reduce((n, b) => n + Number(b.getAttribute('data-done')), 0),
      failed: bars.reduce((n, b) => n + Number(b.getAttribute('data-failed')), 0),
      titled: bars.filter((b) => b.querySelector('title')?.textContent).length,
    }));
  const totals = (history: History) => ({
    bars: history.buckets.length,
    done: history.buckets.reduce((n, b) => n + b.done, 0),
    failed: history.buckets.reduce((n, b) => n + b.failed + b.partiallyFailed, 0),
  });

  beforeAll(async () => {
    ({ node, page } = await rig.start(startDemoNode(database.url, NODE_ENV)));
  });

  afterAll(() => rig.close({ screenshot: 'ops-page-charts.png' }));

  it('counts the episodes finished per minute by terminal status, one bucket per minute of the window', async () => {
    const events = await Promise.all([
      ...['db-1', 'db-2', 'db-3'].map((resource) =>
        publish('resource.updated', { resource, usage: 1 }),
      ),
      ...['rack-1', 'rack-2'].map((resource) =>
        publish('resource.rebalance_once', { resource, stepMs: 10, failAtStep: 1 }),
      ),
    ]);
    const ours = await Promise.all(events.map(finished));
    expect(ours.map((e) => e.status)).toEqual(['done', 'done', 'done', 'failed', 'failed']);

    // Every minute of the window, oldest first, the one under way last (database clock).
    const history = await ops<History>('/history');
    expect(history.minutes).toBe(60);
    expect(history.buckets).toHaveLength(60);
    const minutes = history.buckets.map((b) => Date.parse(b.minute));
    expect(minutes.every((m, i) => i === 0 || m - (minutes[i - 1] as number) === 60_000)).toBe(
      true,
    );
    expect(minutes.at(-1)).toBe(Math.floor(Date.parse(history.at) / 60_000) * 60_000);

    // The minute under way (or the one before, had the clock just turned) holds our five.
    const ourCounts = perMinute(ours);
    for (const [minute, counts] of ourCounts) {
      const bucket = history.buckets.find((b) => Date.parse(b.minute) === minute);
      expect(bucket?.done).toBeGreaterThanOrEqual(counts.done);
      expect(bucket?.failed).toBeGreaterThanOrEqual(counts.failed);
    }
    // And every bucket is exactly the episodes that finished in it, none left out, none doubled.
    const expected = perMinute(await allEpisodes());
    for (const bucket of history.buckets) {
      const { minute, ...counts } = bucket;
      expect({ minute, ...counts }).toEqual({
        minute,
        ...(expected.get(Date.parse(minute)) ?? {
          done: 0,
          failed: 0,
          partiallyFailed: 0,
          canceled: 0,
        }),
      });
    }
    expect([...expected.keys()].every((m) => minutes.includes(m))).toBe(true);

    // A shorter window, and a 400 naming the field for a bad one.
    expect((await ops<History>('/history?minutes=5')).buckets).toHaveLength(5);
    for (const bad of ['0', '1441', 'soon', '1.5']) {
      const answer = await fetch(`http://127.0.0.1:${node.port}/ops/api/history?minutes=${bad}`);
      expect({ bad, status: answer.status }).toEqual({ bad, status: 400 });
      const body = (await answer.json()) as { message: string[] };
      expect([body.message].flat().join('; ')).toContain('minutes must be a whole number');
    }
  });

  it('draws the hour as stacked bars that add up to those counts, and redraws by its own refresh', async () => {
    const script = await fetch(`http://127.0.0.1:${node.port}/ops/assets/charts.js`);
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toMatch(/^text\/javascript/);

    await page.goto(`http://127.0.0.1:${node.port}/ops`);
    await page.getByTestId('history-chart').waitFor();
    const shows = async (what: string, timeoutMs: number) => {
      let last: unknown;
      await waitFor(
        what,
        async () => {
          const [drawn, history] = await Promise.all([chart(), ops<History>('/history')]);
          const api = totals(history);
          last = { drawn, api };
          const same =
            drawn.titled === drawn.bars &&
            drawn.bars === api.bars &&
            drawn.done === api.done &&
            drawn.failed === api.failed;
          return same ? drawn : undefined;
        },
        timeoutMs,
        200,
      ).catch((error: Error) => {
        throw new Error(`${error.message}; last seen ${JSON.stringify(last)}`);
      });
    };
    await shows('the chart to add up to the API', 15_000);
    const first = await chart();
    expect(first).toMatchObject({ bars: 60 });
    expect(first.done).toBeGreaterThanOrEqual(3);
    expect(first.failed).toBeGreaterThanOrEqual(2);
    const legend = await page
      .locator('[data-testid="history-chart"] text.legend')
      .allTextContents();
    expect(legend).toEqual(['done', 'failed', 'canceled']);

    // One more failure: the page's own refresh (at most every 12 s for this chart) draws it.
    const eventId = await publish('resource.rebalance_once', {
      resource: 'rack-3',
      stepMs: 10,
      failAtStep: 1,
    });
    await finished(eventId);
    await waitFor(
      'the chart to draw the new failure',
      async () => (await chart()).failed === first.failed + 1,
      30_000,
      200,
    );
    await shows('the chart to add up to the API again', 15_000);
    expect(await page.locator('[data-testid="history-total"]').textContent()).toMatch(
      /^\d+ done, \d+ failed, \d+ canceled$/,
    );
    expect(rig.pageErrors).toEqual([]);
    expect(rig.policyViolations).toEqual([]);
  }, 120_000);
});
