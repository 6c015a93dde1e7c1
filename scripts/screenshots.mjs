#!/usr/bin/env node
// Regenerates the operations page's screenshots in docs/images/ (1440×900, viewport only): the main
// view, a failed episode's detail and the cluster view with a node gone quiet. Run after a build:
//
//   npm run docs:screenshots          (npm run build && node scripts/screenshots.mjs)
//   SCREENSHOTS_DIR=/tmp/shots node scripts/screenshots.mjs      (elsewhere than docs/images/)
//
// It starts its own demo cluster (apps/demo/dist/launcher.js: three nodes on free ports, embedded
// PostgreSQL in a temporary folder, DATABASE_URL ignored), creates some activity (a dozen done
// episodes, two failed ones, one still running, one deferred), drives headless Chromium
// (@sparticuz/chromium) through the page, then kill -9s node-3 for the cluster view. The launcher is
// stopped with SIGINT and the folder removed, whatever happened; a failure is one line on stderr
// (naming a file with the launcher's output) and exit code 1. It takes about 25 s.

/* global window, document -- inside page.evaluate, which runs in the page */
import chromium from '@sparticuz/chromium';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { clearTimeout, setTimeout } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { chromium as pw } from 'playwright-core';

const { fetch } = globalThis;
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const LAUNCHER = join(root, 'apps/demo/dist/launcher.js');
const OUTPUT = resolve(process.env.SCREENSHOTS_DIR ?? join(root, 'docs/images'));
const VIEWPORT = { width: 1440, height: 900 };
/** The whole run, cluster start and stop included; each wait below has a shorter deadline of its own. */
const OVERALL_MS = 150_000;

const say = (line) => process.stdout.write(`[screenshots] ${line}\n`);

/** Polls `probe` until it returns something truthy, which it resolves with; rejects after `timeoutMs`. */
async function waitFor(what, probe, timeoutMs = 20_000, intervalMs = 200) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() >= deadline) {
      const why = last ? ` (last error: ${last instanceof Error ? last.message : last})` : '';
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${why}`);
    }
    await sleep(intervalMs);
  }
}

function canListen(port) {
  return new Promise((done) => {
    const server = createServer();
    server.once('error', () => done(false));
    server.listen(port, '127.0.0.1', () => server.close(() => done(true)));
  });
}

/** A port the OS hands out, whose next `count - 1` neighbours are free too (the launcher counts up). */
async function consecutiveFreePorts(count) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = await new Promise((done, fail) => {
      const server = createServer();
      server.once('error', fail);
      server.listen(0, '127.0.0.1', () => {
        const { port } = server.address();
        server.close(() => done(port));
      });
    });
    if (base + count > 65_536) continue;
    const rest = await Promise.all(
      Array.from({ length: count - 1 }, (_, i) => canListen(base + i + 1)),
    );
    if (rest.every(Boolean)) return base;
  }
  throw new Error(`found no ${count} free consecutive ports`);
}

/** The launcher as a child process, its output kept (and searched) rather than shown. */
function startLauncher(args, dataDir) {
  const env = {
    ...process.env,
    DEMO_NODE_BEAT_MS: '3000',
    DEMO_RETRY_INITIAL_MS: '200',
    DEMO_ADVISOR_EVERY: '1h',
    // A running episode holds a draining node this long at the end.
    DEMO_SHUTDOWN_MS: '1000',
    NO_COLOR: '1',
  };
  // Its own PostgreSQL in the temporary folder: the pictures show only what this script caused.
  delete env.DATABASE_URL;
  const child = spawn(process.execPath, [LAUNCHER, ...args, '--data-dir', dataDir], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  const exited = new Promise((done) => child.once('exit', (code, signal) => done(signal ?? code)));
  /** The line that says what went wrong, where there is one; else the last. */
  const lastLine = () => {
    const lines = output.split('\n').filter((line) => line.trim());
    const telling = lines.filter((line) => /failed|could not|refus|in use|error/i.test(line));
    return (telling.at(-1) ?? lines.at(-1) ?? '(no output)').trim();
  };
  return { child, exited, output: () => output, lastLine };
}

async function post(port, path, body) {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.status !== 202) {
    const text = (await response.text()).replace(/\s+/g, ' ').slice(0, 200);
    throw new Error(`POST ${path} on port ${port} answered ${response.status}: ${text}`);
  }
  return response.json();
}

async function get(port, path) {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  if (!response.ok) throw new Error(`GET ${path} on port ${port} answered ${response.status}`);
  return response.json();
}

/**
 * The activity the pictures show, spread over the three nodes; resolves with the episodes it
 * expects, each with the status to wait for, once the list shows every one of them so.
 */
async function createActivity(ports) {
  const expected = []; // { what, eventId?, episodeId?, status }
  const event = async (n, type, payload, status) => {
    const { eventId } = await post(ports[n % ports.length], '/events', { type, payload });
    expected.push({ what: `${type} ${payload.resource}`, eventId, status });
  };
  const updates = [
    ['db-1', 97],
    ['db-2', 64],
    ['cache-1', 92, 85],
    ['queue-1', 41],
    ['api-gateway', 88],
    ['search-1', 99, 95],
    ['db-1', 72],
    ['blob-store', 55, 80],
    ['cache-2', 83],
    ['queue-2', 94],
  ];
  for (const [i, [resource, usage, limit]] of updates.entries()) {
    await event(i, 'resource.updated', { resource, usage, ...(limit && { limit }) }, 'done');
  }
  await event(1, 'resource.rebalance', { resource: 'db-2', stepMs: 150 }, 'done');
  await event(2, 'resource.rebalance', { resource: 'queue-1', stepMs: 120 }, 'done');
  await event(
    0,
    'resource.rebalance_once',
    { resource: 'cache-1', stepMs: 100, failAtStep: 2 },
    'failed',
  );
  await event(
    1,
    'resource.rebalance_retried',
    { resource: 'db-1', stepMs: 100, failAtStep: 3 },
    'failed',
  );
  const retried = expected.at(-1);

  // A slow one on node-3, still running when that node is killed; one deferred a quarter of an hour.
  const slow = await post(ports[2], '/actors/resource_rebalancer/rebalance', {
    payload: { resource: 'search-1', stepMs: 30_000 },
  });
  expected.push({ what: 'the slow rebalance', episodeId: slow.episodeId, status: 'running' });
  const later = await post(ports[1], '/actors/resource_rebalancer/rebalance', {
    payload: { resource: 'blob-store', stepMs: 200 },
    delayMs: 15 * 60_000,
  });
  if (later.status !== 'deferred') throw new Error(`a run with delayMs answered ${later.status}`);
  expected.push({ what: 'the deferred rebalance', episodeId: later.episodeId, status: 'deferred' });

  const list = () => get(ports[0], '/ops/api/episodes?limit=100');
  const byEvent = async (eventId) =>
    (await get(ports[0], `/ops/api/episodes?eventId=${encodeURIComponent(eventId)}`)).items[0];
  await waitFor(
    'every episode to reach its status',
    async () => {
      const items = new Map((await list()).items.map((e) => [e.id, e]));
      for (const entry of expected) {
        if (!entry.episodeId) entry.episodeId = (await byEvent(entry.eventId))?.id;
        const episode = entry.episodeId && items.get(entry.episodeId);
        if (!episode || episode.status !== entry.status) return false;
      }
      return true;
    },
    30_000,
    250,
  );
  const failedAfterRetries = (await list()).items.find((e) => e.id === retried.episodeId);
  if ((failedAfterRetries.retries ?? 0) !== 2) {
    throw new Error(
      `the rebalance_retried episode failed after ${failedAfterRetries.retries ?? 0} retries, not 2`,
    );
  }
  return { expected, retriedId: retried.episodeId };
}

/** Resolves once the page's scroll position holds still (scrollIntoView, layout after a render). */
async function scrollSettled(page) {
  let previous = -1;
  await waitFor(
    'the page to stop scrolling',
    async () => {
      const y = await page.evaluate(() => window.scrollY);
      const still = y === previous;
      previous = y;
      return still;
    },
    5_000,
    150,
  );
}

async function screenshots(ports, pidOf) {
  const executablePath = await chromium.executablePath();
  // handleSIGINT: Playwright's own would exit at once (130), before the cluster is stopped.
  const browser = await pw.launch({
    executablePath,
    args: chromium.args,
    headless: true,
    handleSIGINT: false,
  });
  try {
    // One page for the whole run: single-process Chromium closes itself with its last extra page.
    const page = await browser.newPage({ viewport: VIEWPORT, deviceScaleFactor: 1 });
    page.setDefaultTimeout(20_000);
    const ops = `http://127.0.0.1:${ports[0]}/ops`;
    const attr = (selector, name) =>
      page.locator(selector).first().getAttribute(name, { timeout: 1_000 });
    const nodeHealth = (identity) =>
      attr(`[data-testid="node-row"][data-identity="${identity}"]`, 'data-health');
    const everyNodeLive = async () => {
      for (const identity of ['node-1', 'node-2', 'node-3'])
        if ((await nodeHealth(identity)) !== 'live') return false;
      return true;
    };
    const refreshed = async () =>
      (await page.getByTestId('refreshed-at').textContent()).trim() !== '' &&
      !(await page.evaluate(() => document.body.hasAttribute('data-refreshing')));

    return {
      async main(expected) {
        await page.goto(ops);
        await waitFor('the main view to show every node live and every episode', async () => {
          if (!(await everyNodeLive())) return false;
          for (const { episodeId, status } of expected) {
            const row = `[data-testid="episode-row"][data-episode-id="${episodeId}"]`;
            if ((await attr(row, 'data-status')) !== status) return false;
          }
          return refreshed();
        });
        await page.screenshot({ path: join(OUTPUT, 'ops-main.png') });
      },

      async episode(id) {
        await page.goto(`${ops}?episode=${encodeURIComponent(id)}`);
        await waitFor('the episode detail with its journal', async () => {
          const shown = (await page.getByTestId('detail-id').textContent()).trim();
          return shown === id && (await page.locator('[data-testid="step-row"]').count()) > 0;
        });
        // The timeline, where this release has one: part of the detail, waited for when present.
        const timeline = page.locator('[data-testid="episode-timeline"]');
        if ((await timeline.count()) > 0) await timeline.first().waitFor({ state: 'visible' });
        // The page scrolls the detail into view as soon as it has it; when the episodes list of the
        // same first refresh arrives after that, its rows push the detail down again. Once the list
        // is drawn, the detail goes back to where the page put it: below the sticky header.
        await waitFor(
          'the episodes list under the detail',
          async () =>
            (await page.locator(`[data-testid="episode-row"][data-episode-id="${id}"]`).count()) >
              0 && refreshed(),
        );
        await page.evaluate(() =>
          document
            .querySelector('[data-testid="episode-detail"]')
            .scrollIntoView({ block: 'start' }),
        );
        await scrollSettled(page);
        await page.screenshot({ path: join(OUTPUT, 'ops-episode.png') });
      },

      async cluster() {
        await page.goto(ops);
        await waitFor('the nodes table to show every node live', everyNodeLive);
        const pid = pidOf('node-3');
        process.kill(pid, 'SIGKILL');
        say(`killed node-3 (pid ${pid}) with SIGKILL`);
        await waitFor(
          'node-3 to show suspect or stale',
          async () => ['suspect', 'stale'].includes(await nodeHealth('node-3')),
          20_000,
          100,
        );
        // The Nodes section at the top, just below the sticky header.
        await page.evaluate(() => {
          const section = document.querySelector('[data-testid="nodes-table"]').closest('section');
          const header = document.querySelector('header');
          const top = section.getBoundingClientRect().top + window.scrollY;
          window.scrollTo(0, Math.max(0, top - (header ? header.offsetHeight : 0)));
        });
        await scrollSettled(page);
        await page.screenshot({ path: join(OUTPUT, 'ops-cluster.png') });
      },

      close: () => browser.close(),
    };
  } catch (error) {
    await browser.close();
    throw error;
  }
}

async function run(state) {
  state.dataRoot = await mkdtemp(join(tmpdir(), 'cyclium-screenshots-'));
  await mkdir(OUTPUT, { recursive: true });
  const base = await consecutiveFreePorts(3);
  const ports = [base, base + 1, base + 2];
  say(`starting the demo cluster on ports ${base}-${base + 2} (data in ${state.dataRoot})`);
  const launcher = startLauncher(
    ['--nodes', '3', '--base-port', String(base)],
    join(state.dataRoot, 'pgdata'),
  );
  state.launcher = launcher;
  await Promise.race([
    waitFor(
      'the launcher to say "cluster up"',
      () => launcher.output().includes('cluster up'),
      90_000,
    ),
    launcher.exited.then((how) => {
      throw new Error(
        `the launcher exited (${how}) before the cluster was up: ${launcher.lastLine()}`,
      );
    }),
  ]);
  const pidOf = (id) => {
    const match = launcher.output().match(new RegExp(`\\b${id} \\(\\w+, pid (\\d+)\\)`));
    if (!match) throw new Error(`the launcher did not say ${id}'s pid`);
    return Number(match[1]);
  };

  const { expected, retriedId } = await createActivity(ports);
  say(`${expected.length} episodes in place; taking the screenshots`);
  const shots = await screenshots(ports, pidOf);
  state.browser = shots;
  await shots.main(expected);
  await shots.episode(retriedId);
  await shots.cluster();
  await shots.close();
  state.browser = undefined;
  for (const name of ['ops-main.png', 'ops-episode.png', 'ops-cluster.png'])
    say(`wrote ${relative(process.cwd(), join(OUTPUT, name)) || name}`);
}

/** SIGINT to the launcher (it stops the nodes, then PostgreSQL); SIGKILL to it and its processes if it hangs. */
async function stopLauncher(launcher) {
  if (launcher.child.exitCode !== null || launcher.child.signalCode !== null) return;
  launcher.child.kill('SIGINT');
  const how = await Promise.race([launcher.exited, sleep(45_000).then(() => 'timeout')]);
  if (how !== 'timeout') return;
  // Its nodes run in process groups of their own: whatever pids it named, this script ends too.
  const pids = [...launcher.output().matchAll(/\bpid (\d+)/g)].map((m) => Number(m[1]));
  for (const pid of [launcher.child.pid, ...pids]) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  throw new Error('the launcher did not stop within 45 s of SIGINT (killed it)');
}

async function main() {
  const started = Date.now();
  const state = {};
  let failure;
  let timer;
  const interrupted = new Promise((_, fail) => {
    process.once('SIGINT', () => fail(new Error('interrupted')));
    timer = setTimeout(
      () => fail(new Error(`did not finish within ${OVERALL_MS / 1000} s`)),
      OVERALL_MS,
    );
  });
  try {
    await Promise.race([run(state), interrupted]);
  } catch (error) {
    failure = error;
  } finally {
    clearTimeout(timer);
  }
  try {
    await state.browser?.close();
  } catch {
    // the browser is gone with it
  }
  if (state.launcher) {
    try {
      await stopLauncher(state.launcher);
    } catch (error) {
      failure ??= error;
    }
  }
  if (state.dataRoot) await rm(state.dataRoot, { recursive: true, force: true });
  if (failure) {
    let message = (failure instanceof Error ? failure.message : String(failure)).split('\n')[0];
    if (state.launcher) {
      // The cluster's own lines, for the why: the temporary folder is gone, this file stays.
      const log = join(tmpdir(), 'cyclium-screenshots-launcher.log');
      await writeFile(log, state.launcher.output()).then(
        () => (message += ` (the launcher's output: ${log})`),
        () => undefined,
      );
    }
    process.stderr.write(`[screenshots] failed: ${message}\n`);
    process.exit(1);
  }
  say(`done in ${Math.round((Date.now() - started) / 1000)} s`);
  process.exit(0);
}

await main();
