import chromium from '@sparticuz/chromium';
import { expect } from '@jest/globals';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { chromium as pw, type Browser, type Page, type Route } from 'playwright-core';
import type { DemoNode } from './demo-node.js';
import { waitFor } from './wait-for.js';

/** Where a page test leaves its last screenshot (test/output/, ignored by git). */
const OUTPUT = fileURLToPath(new URL('../output/', import.meta.url));

/** Headless Chromium from @sparticuz/chromium (`npm install` alone brings it). */
export async function launchChromium(): Promise<Browser> {
  const executablePath = await chromium.executablePath();
  return pw.launch({ executablePath, args: chromium.args, headless: true });
}

/**
 * A node process and a browser started together, for a page test: whichever of the two fails,
 * the other is kept so `close()` in afterAll still stops it. Tracks the page's script errors and
 * what Chromium refused under the page's Content-Security-Policy.
 */
export class OpsBrowserRig<N extends { stop(signal?: NodeJS.Signals): Promise<void> }> {
  node: N | undefined;
  browser: Browser | undefined;
  page!: Page;
  readonly pageErrors: string[] = [];
  readonly policyViolations: string[] = [];

  async start(
    starting: Promise<N>,
    viewport = { width: 1400, height: 1100 },
  ): Promise<{ node: N; page: Page }> {
    const [started, launched] = await Promise.allSettled([starting, launchChromium()]);
    if (started.status === 'fulfilled') this.node = started.value;
    if (launched.status === 'fulfilled') this.browser = launched.value;
    if (started.status === 'rejected') throw started.reason;
    if (launched.status === 'rejected') throw launched.reason;
    this.page = await launched.value.newPage({ viewport });
    // Each wait has its own deadline; a missing element fails as fast as they do.
    this.page.setDefaultTimeout(15_000);
    this.page.on('pageerror', (error) => this.pageErrors.push(error.message));
    this.page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text()))
        this.policyViolations.push(message.text());
    });
    return { node: started.value, page: this.page };
  }

  /**
   * Stops both (the node with `signal`, SIGTERM unless given). With `screenshot`, a file name, the
   * page as it was left is saved first to test/output/ under that name, to look at after a run;
   * the node and the browser are stopped even when that fails.
   */
  async close(options: { signal?: NodeJS.Signals; screenshot?: string } = {}): Promise<void> {
    try {
      if (options.screenshot && this.page) {
        await mkdir(OUTPUT, { recursive: true });
        await this.page.screenshot({ path: `${OUTPUT}${options.screenshot}`, fullPage: true });
      }
    } finally {
      try {
        await this.browser?.close();
      } finally {
        await this.node?.stop(options.signal ?? 'SIGTERM');
      }
    }
  }
}

/** POST /events on a demo node (202 expected); the event's id. */
export async function publishEvent(port: number, type: string, payload: object): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${port}/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ type, payload }),
  });
  expect(response.status).toBe(202);
  return ((await response.json()) as { eventId: string }).eventId;
}

/**
 * The one episode an event caused, found through the node's operations API: POST /events answers
 * before the episode exists, so this polls until it does.
 */
export function episodeOf<E>(node: Pick<DemoNode, 'get'>, eventId: string): Promise<E> {
  return waitFor(
    `the episode of event ${eventId}`,
    async () =>
      (await node.get<{ items: E[] }>(`/ops/api/episodes?eventId=${encodeURIComponent(eventId)}`))
        .items[0],
  ) as Promise<E>;
}

/**
 * Holds the page's requests to `url` until the returned function is called, which lets them through
 * and then removes this route (and no other) once every request it held has gone on: a route removed
 * while one of its requests is held lets that request through itself, and the handler's own
 * continue then throws.
 */
export async function holdRequests(page: Page, url: string): Promise<() => Promise<void>> {
  let open = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  const held: Array<Promise<void>> = [];
  const handler = (route: Route) => {
    const handled = opened.then(() => route.continue());
    held.push(handled);
    return handled;
  };
  await page.route(url, handler);
  return async () => {
    open();
    // A request that arrived meanwhile goes on at once, but is awaited too.
    for (let awaited = 0; awaited < held.length;) {
      const seen = held.length;
      await Promise.all(held);
      awaited = seen;
    }
    await page.unroute(url, handler);
  };
}
