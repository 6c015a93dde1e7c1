import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplication } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { CycliumOpsModule } from '@cyclium/nestjs/ops';
import chromium from '@sparticuz/chromium';
import { metrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader, type GaugeMetricData } from '@opentelemetry/sdk-metrics';
import pg from 'pg';
import { chromium as pw } from 'playwright-core';
import { FlowStatusReader } from '../libs/cyclium/src/episodes/flow-status.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

interface Job {
  customer: string;
}

/** The keyed episodes hold their slots until the test opens this gate. */
let open: () => void = () => undefined;
const gate = new Promise<void>((resolve) => (open = resolve));

@Injectable()
@Actor({ id: 'flowops', maxConcurrentEpisodes: 8 })
class FlowOpsActor {
  @Expectation({
    id: 'keyed',
    trigger: 'manual',
    concurrency: { limit: 2, key: (p: Job) => p.customer, total: 3 },
  })
  async keyed(): Promise<Convergence> {
    await gate;
    return { summary: 'ok' };
  }

  @Expectation({
    id: 'rated',
    trigger: 'manual',
    rateLimit: { limit: 2, periodMs: 60_000, key: (p: Job) => p.customer },
  })
  rated(): Promise<Convergence> {
    return Promise.resolve({ summary: 'ok' });
  }

  @Expectation({ id: 'free', trigger: 'manual' })
  free(ep: EpisodeContext<Job>): Promise<Convergence> {
    return Promise.resolve({ summary: ep.trigger.payload.customer });
  }
}

/** Collects on demand: the test reads the gauges the way an exporter would. */
class TestReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

interface KeyStatus {
  key: string;
  running: number;
  waiting: number;
  oldestWaitingAt: string | null;
}
interface ExpectationStatus {
  actorId: string;
  expectationId: string;
  concurrency: { limit: number; total: number | null; keyed: boolean } | null;
  running: number;
  waiting: number;
  oldestWaitingAt: string | null;
  keyCount: number;
  keys: KeyStatus[];
  otherKeys: { keys: number; running: number; waiting: number } | null;
  rate: {
    limit: number;
    periodMs: number;
    keyed: boolean;
    starts: number;
    keyCount: number;
    keys: Array<{ key: string; starts: number; freesAt: string | null }>;
    otherKeys: { keys: number; starts: number } | null;
  } | null;
}
interface Flow {
  at: string;
  env: string | null;
  expectations: ExpectationStatus[];
}

/**
 * The operations API's flow read, in process: a limited expectation over its limits shows its
 * running episodes against the limits and the rest waiting `throttled`, per key (the busiest listed,
 * the rest added up), the rate window per rate key; `?status=throttled` lists the waiting ones and
 * cancel ends one. The read's statement uses the flow indexes on a filled table.
 */
describe('the operations API: flow control', () => {
  let url: string;
  let db: pg.Pool;
  let app: INestApplication;
  let base: string;
  const reader = new TestReader();

  const get = async <T>(path: string): Promise<T> => {
    const response = await fetch(`${base}/ops/api${path}`);
    const body = (await response.json()) as T;
    if (!response.ok) throw new Error(`GET ${path} → ${response.status} ${JSON.stringify(body)}`);
    return body;
  };
  const flowOf = (flow: Flow, expectationId: string) =>
    flow.expectations.find((e) => e.expectationId === expectationId)!;

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 2);
    // Registered before the app starts, so its metrics are on.
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    app = (await startCycliumApp({
      url,
      cyclium: { nodeIdentity: 'flow-ops', workClaims: 'postgres', triggerPollIntervalMs: 300 },
      providers: [FlowOpsActor],
      imports: [CycliumOpsModule.forRoot({ path: 'ops', guard: false })],
    })) as INestApplication;
    await app.listen(0, '127.0.0.1');
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    const episodes = app.get(Episodes);
    const trigger = async (expectation: string, customer: string) => {
      const result = await episodes.trigger('flowops', expectation, { customer });
      if (!('episode' in result)) throw new Error(`not accepted: ${result.status}`);
    };
    for (let i = 0; i < 4; i++) await trigger('keyed', 'acme');
    await trigger('keyed', 'globex');
    for (let i = 0; i < 5; i++) await trigger('rated', 'initech');
  });

  afterAll(async () => {
    open();
    await app?.close();
    await db?.end();
    metrics.disable();
  });

  it('shows running against the limits and the rest waiting, per key', async () => {
    // acme: 2 of its 4 run (its limit), globex: 1 (the total of 3), acme's other 2 wait; the 2
    // rated ones the window let start have ended.
    const flow = await waitFor('the keyed episodes to fill the limits', async () => {
      const read = await get<Flow>('/flow');
      const settled = flowOf(read, 'keyed').running === 3 && flowOf(read, 'rated').running === 0;
      return settled ? read : undefined;
    }).then((read) => read!);
    expect(flow.env).toBeNull();
    expect(flow.expectations.map((e) => e.expectationId).sort()).toEqual(['keyed', 'rated']);
    const keyed = flowOf(flow, 'keyed');
    expect(keyed).toMatchObject({
      actorId: 'flowops',
      concurrency: { limit: 2, total: 3, keyed: true },
      running: 3,
      waiting: 2,
      keyCount: 2,
      otherKeys: null,
      rate: null,
    });
    expect(keyed.keys.map(({ key, running, waiting }) => ({ key, running, waiting }))).toEqual([
      { key: 'acme', running: 2, waiting: 2 },
      { key: 'globex', running: 1, waiting: 0 },
    ]);
    expect(keyed.keys[0]!.oldestWaitingAt).not.toBeNull();
    expect(keyed.keys[1]!.oldestWaitingAt).toBeNull();

    // The rate window: 2 of initech's 5 started in it, 3 wait for it to free (a minute on).
    const rated = flowOf(flow, 'rated');
    expect(rated).toMatchObject({ concurrency: null, running: 0, waiting: 3, keyCount: 1 });
    expect(rated.rate).toMatchObject({
      limit: 2,
      periodMs: 60_000,
      keyed: true,
      starts: 2,
      keyCount: 1,
      otherKeys: null,
    });
    expect(rated.rate!.keys).toHaveLength(1);
    expect(rated.rate!.keys[0]).toMatchObject({ key: 'initech', starts: 2 });
    const freesIn = Date.parse(rated.rate!.keys[0]!.freesAt!) - Date.parse(flow.at);
    expect(freesIn).toBeGreaterThan(50_000);
    expect(freesIn).toBeLessThanOrEqual(60_000);
  });

  it('lists the busiest keys and adds up the rest; validates keys', async () => {
    const keyed = flowOf(await get<Flow>('/flow?keys=1'), 'keyed');
    expect(keyed.keys.map((k) => k.key)).toEqual(['acme']);
    expect(keyed.otherKeys).toMatchObject({ keys: 1, running: 1, waiting: 0 });
    expect(keyed).toMatchObject({ running: 3, waiting: 2, keyCount: 2 });
    const bad = await fetch(`${base}/ops/api/flow?keys=0`);
    expect(bad.status).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain('keys');
  });

  it('shows each limited expectation and key on the page', async () => {
    const executablePath = await chromium.executablePath();
    const browser = await pw.launch({ executablePath, args: chromium.args, headless: true });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.setDefaultTimeout(15_000);
      await page.goto(`${base}/ops`);
      const keyed = page.locator('[data-testid="flow-expectation"][data-expectation="keyed"]');
      await keyed.locator('[data-testid="flow-key"][data-key="acme"]').waitFor();
      expect(await keyed.locator('h3').textContent()).toContain('concurrency 2 per key, 3 in all');
      expect(await keyed.getByTestId('flow-totals').textContent()).toMatch(
        /^running 3 \/ 3 · waiting 2 · oldest queued .* ago · 2 keys$/,
      );
      const cells = async (key: string) =>
        keyed.locator(`[data-testid="flow-key"][data-key="${key}"] td`).allTextContents();
      expect((await cells('acme')).slice(0, 3)).toEqual(['acme', '2 / 2 full', 'throttled 2']);
      expect((await cells('globex')).slice(0, 3)).toEqual(['globex', '1 / 2', '0']);
      const rated = page.locator('[data-testid="flow-expectation"][data-expectation="rated"]');
      expect(
        await rated
          .locator('[data-testid="flow-rate-key"][data-key="initech"] td')
          .allTextContents(),
      ).toEqual([
        'initech',
        expect.stringMatching(/^2 \/ 2 per 1 min, full: frees in \d+ (s|min)$/),
      ]);
      expect(await page.getByTestId('filter-status').locator('option').allTextContents()).toContain(
        'throttled',
      );
      // The status filter lists the throttled ones, each saying what holds it.
      await page.getByTestId('filter-status').selectOption('throttled');
      await page.getByTestId('filter-apply').click();
      await waitFor('the throttled rows', async () =>
        (await page.getByTestId('episode-throttled').count()) === 5 ? true : undefined,
      );
      expect((await page.getByTestId('episode-throttled').allTextContents()).sort()).toEqual([
        ...Array<string>(2).fill('waits for its limits (key acme)'),
        ...Array<string>(3).fill('waits for its limits (key initech)'),
      ]);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('counts the same into bounded buckets for the metrics and its gauges', async () => {
    const buckets = await app.get(FlowStatusReader).buckets(
      [
        { actorId: 'flowops', id: 'keyed', options: { concurrency: { limit: 2, key: () => 'x' } } },
        { actorId: 'flowops', id: 'free', options: {} },
      ],
      0,
    );
    // Every label of a keyed expectation is listed (b0 to b15), no key appears as one.
    expect(buckets.map((b) => b.bucket).sort()).toEqual(
      Array.from({ length: 16 }, (_, i) => `b${i}`).sort(),
    );
    expect(buckets.reduce((n, b) => n + (b.running ?? 0), 0)).toBe(3);
    expect(buckets.reduce((n, b) => n + (b.waiting ?? 0), 0)).toBe(2);
    expect(buckets.every((b) => b.rateWindowStarts === null)).toBe(true);

    // The gauges, as an exporter collects them: 16 buckets each, their sums the /flow numbers.
    const { resourceMetrics } = await reader.collect();
    const gauge = (name: string) =>
      resourceMetrics.scopeMetrics
        .flatMap((scope) => scope.metrics)
        .find((metric) => metric.descriptor.name === name) as GaugeMetricData;
    const of = (name: string, expectation: string) =>
      gauge(name).dataPoints.filter((p) => p.attributes['cyclium.expectation'] === expectation);
    const total = (name: string, expectation: string) =>
      of(name, expectation).reduce((n, p) => n + p.value, 0);
    expect(of('cyclium.flow.running', 'keyed')).toHaveLength(16);
    expect(total('cyclium.flow.running', 'keyed')).toBe(3);
    expect(total('cyclium.flow.throttled', 'keyed')).toBe(2);
    expect(total('cyclium.flow.throttled', 'rated')).toBe(3);
    expect(total('cyclium.flow.rate_window_starts', 'rated')).toBe(2);
    expect(of('cyclium.flow.rate_window_starts', 'keyed')).toEqual([]);
    const labels = gauge('cyclium.flow.running').dataPoints.map(
      (p) => p.attributes['cyclium.flow.key_bucket'],
    );
    expect(labels.every((label) => typeof label === 'string' && /^b\d+$/.test(label))).toBe(true);
  });

  it('filters episodes by status throttled, and cancels a throttled one', async () => {
    const page = await get<{
      items: Array<{ id: string; expectationId: string; status: string; flowKey: string }>;
    }>('/episodes?status=throttled&actor=flowops');
    expect(page.items.map((e) => e.expectationId).sort()).toEqual([
      'keyed',
      'keyed',
      'rated',
      'rated',
      'rated',
    ]);
    expect(page.items.every((e) => e.status === 'throttled')).toBe(true);
    expect(page.items.map((e) => e.flowKey).sort()).toEqual([
      'acme',
      'acme',
      'initech',
      'initech',
      'initech',
    ]);
    const victim = page.items.find((e) => e.expectationId === 'rated')!;
    const cancel = await fetch(`${base}/ops/api/episodes/${victim.id}/cancel`, {
      method: 'POST',
      headers: { 'x-cyclium-ops': '1' },
    });
    expect(cancel.status).toBe(200);
    expect(await cancel.json()).toEqual({ result: 'canceled' });
    // Reads within half a second share one: the next one counts 2.
    await waitFor('the canceled one to leave the waiting', async () =>
      flowOf(await get<Flow>('/flow'), 'rated').waiting === 2 ? true : undefined,
    );
    // cluster() shares a read within half a second too: one from before the cancel may answer.
    await waitFor('the cluster to count 4 throttled', async () => {
      const cluster = await get<{
        active: Array<{ actorId: string; status: string; count: number }>;
      }>('/cluster');
      return cluster.active.some(
        (a) => a.actorId === 'flowops' && a.status === 'throttled' && a.count === 4,
      );
    });
  });

  it('reads with the flow indexes on a filled table', async () => {
    // 20 000 throttled rows over 2 000 keys and 600 running ones of an actor no node hosts (so no
    // recovery touches them), and 50 000 finished rows: the plan reads the partial indexes.
    await db.query(
      `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status,
                                     owner_node, flow_key, started_at, finished_at)
       SELECT 'flowfill', 'keyed', 'manual', '{}'::jsonb,
              CASE WHEN g <= 20000 THEN 'throttled' WHEN g <= 20600 THEN 'running' ELSE 'done' END,
              CASE WHEN g > 20000 AND g <= 20600 THEN 'elsewhere' END,
              CASE WHEN g <= 20600 THEN 'k' || g % 2000 END,
              CASE WHEN g > 20000 THEN now() END, CASE WHEN g > 20600 THEN now() END
         FROM generate_series(1, 70600) g`,
    );
    await db.query(`ANALYZE cyclium_episodes`);
    const sent: Array<{ text: string; values: unknown[] }> = [];
    const capture = {
      sql: {
        query: (text: string, values: unknown[]) => {
          sent.push({ text, values });
          return Promise.resolve({ rows: [] });
        },
      },
    };
    const reader = new FlowStatusReader(capture as never, { env: null } as never);
    await reader.read([
      {
        actorId: 'flowfill',
        id: 'keyed',
        options: {
          concurrency: { limit: 2, key: () => 'x' },
          rateLimit: { limit: 2, periodMs: 1 },
        },
      },
    ]);
    const { text, values } = sent[0]!;
    const { rows } = await db.query<{ 'QUERY PLAN': unknown }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
      values,
    );
    const plan = JSON.stringify(rows[0]!['QUERY PLAN']);
    expect(plan).toContain('"Index Name":"cyclium_episodes_flow_throttled"');
    expect(plan).toContain('"Index Name":"cyclium_episodes_flow_running"');
    expect(plan).toContain('"Index Name":"cyclium_flow_starts_window"');
    const scans: string[] = [];
    const walk = (node: { 'Node Type'?: string; 'Relation Name'?: string; Plans?: unknown[] }) => {
      if (node['Node Type'] === 'Seq Scan') scans.push(node['Relation Name'] ?? '?');
      for (const child of node.Plans ?? []) walk(child as typeof node);
    };
    walk((rows[0]!['QUERY PLAN'] as Array<{ Plan: Parameters<typeof walk>[0] }>)[0]!.Plan);
    expect(scans.filter((relation) => relation !== 'cyclium_flow_starts')).toEqual([]);
    const listed = await app.get(FlowStatusReader).read(
      [
        {
          actorId: 'flowfill',
          id: 'keyed',
          options: { concurrency: { limit: 2, key: () => 'x' } },
        },
      ],
      50,
      0,
    );
    expect(listed.expectations[0]).toMatchObject({ keyCount: 2000, running: 600, waiting: 20000 });
    expect(listed.expectations[0]!.keys).toHaveLength(50);
    expect(listed.expectations[0]!.otherKeys).toMatchObject({ keys: 1950 });
  });
});
