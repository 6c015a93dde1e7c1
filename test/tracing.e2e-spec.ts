import { afterAll, describe, expect, it } from '@jest/globals';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ExportedSpan } from './fixtures/trace-export.js';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const TRACE_NODE = fileURLToPath(new URL('./fixtures/dist/trace-node.js', import.meta.url));
const SERVER = 1;
const ERROR = 2;
const RUN_SPAN = 'episode orders.fulfil';

/**
 * Issue 46, "Done when", first line: traces across real node processes, each with the
 * OpenTelemetry SDK, HTTP auto-instrumentation and a span exporter writing to a file the test
 * reads. A request on node A (trigger-only) triggers an episode that runs on node B; its first
 * attempt fails (a retry with a backoff of 500 ms); B is SIGKILLed in the middle of the second
 * attempt and node C takes the episode over and ends it.
 */
describe('an episode in the trace of the request that triggered it, across nodes and a kill -9', () => {
  const database = useDatabase();
  const dir = mkdtempSync(join(tmpdir(), 'cyclium-trace-'));
  const nodes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    if (!process.env.KEEP_TRACES) rmSync(dir, { recursive: true, force: true });
  });

  const start = async (id: string, env: Record<string, string>) => {
    const node = await startNodeProcess(TRACE_NODE, database.url, {
      env: { CYCLIUM_NODE_ID: id, TRACE_FILE: join(dir, `${id}.jsonl`), ...env },
      ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
    });
    nodes.push(node);
    return node;
  };
  const spansOf = (id: string): ExportedSpan[] => {
    const file = join(dir, `${id}.jsonl`);
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as ExportedSpan);
  };
  const childrenOf = (spans: ExportedSpan[], parent: ExportedSpan) =>
    spans.filter((s) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId);

  it('shares one trace id, one child span per step, a resumed run after the kill and the retry as an event', async () => {
    const a = await start('trace-a', { TRACE_MODE: 'trigger_only' });
    const b = await start('trace-b', { PACK_MS: '600000' });

    const answer = await post<{ status: string; episode: { id: string } }>(a, '/orders/o-1', {});
    expect(answer.status).toBe('deferred');
    const episodeId = answer.episode.id;
    // The second attempt (after the retry) reaches `pack` on B, which then dies.
    await waitFor(
      'the second attempt packing on B',
      () => (b.output().match(new RegExp(`packing ${episodeId}`, 'g'))?.length ?? 0) >= 1,
      30_000,
      100,
    );
    await b.stop('SIGKILL');
    await start('trace-c', { PACK_MS: '50' });
    await waitFor(
      'the episode done on C',
      async () =>
        (await database.db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [episodeId]))
          .rows[0]?.status === 'done',
      60_000,
      200,
    );
    await waitFor(
      "C's run span exported",
      () => spansOf('trace-c').some((s) => s.name === RUN_SPAN),
      10_000,
      100,
    );

    // A's HTTP server span, made by the auto-instrumentation, holds the trigger.
    const request = spansOf('trace-a').find((s) => s.kind === SERVER && s.name.startsWith('POST'));
    expect(request).toBeDefined();
    const traceId = request!.traceId;

    const onB = spansOf('trace-b');
    const onC = spansOf('trace-c');
    const runsOnB = onB.filter((s) => s.name === RUN_SPAN);
    const runsOnC = onC.filter((s) => s.name === RUN_SPAN);
    // B ended one run (the failed first attempt); the second died with B, its span unended.
    expect(runsOnB).toHaveLength(1);
    expect(runsOnC).toHaveLength(1);
    // Every span of the library (the health checks' own HTTP spans are traces of their own).
    const library = [...onB, ...onC].filter((s) => s.kind !== SERVER);
    expect(library.length).toBeGreaterThanOrEqual(2 + 2 + 4);
    for (const span of library) expect(span.traceId).toBe(traceId);

    const first = runsOnB[0]!;
    expect(first.parentSpanId).toBe(request!.spanId);
    expect(first.attributes).toMatchObject({
      'cyclium.actor': 'orders',
      'cyclium.expectation': 'fulfil',
      'cyclium.episode.id': episodeId,
      'cyclium.node': 'trace-b',
      'cyclium.resumed': false,
      'cyclium.outcome': 'retrying',
    });
    const retry = first.events.find((e) => e.name === 'cyclium.retry_scheduled');
    expect(retry?.attributes).toMatchObject({ 'cyclium.attempt': 1, 'cyclium.backoff_ms': 500 });
    const firstSteps = childrenOf(onB, first);
    expect(firstSteps.map((s) => s.attributes['cyclium.step.name'])).toEqual(['reserve', 'charge']);
    expect(firstSteps.map((s) => s.status)).toEqual([0, ERROR]);

    // The run after the kill: the same trace, marked resumed, taken over, one child per step.
    const last = runsOnC[0]!;
    expect(last.parentSpanId).toBe(request!.spanId);
    expect(last.attributes).toMatchObject({
      'cyclium.episode.id': episodeId,
      'cyclium.node': 'trace-c',
      'cyclium.resumed': true,
      'cyclium.outcome': 'done',
    });
    expect(last.events.map((e) => e.name)).toContain('cyclium.takeover');
    const lastSteps = childrenOf(onC, last);
    expect(
      lastSteps.map((s) => [
        s.attributes['cyclium.step.number'],
        s.attributes['cyclium.step.name'],
        s.attributes['cyclium.step.replayed'],
      ]),
    ).toEqual([
      [1, 'reserve', true],
      [2, 'charge', true],
      [3, 'pack', false],
      [4, 'ship', false],
    ]);
  }, 120_000);
});
