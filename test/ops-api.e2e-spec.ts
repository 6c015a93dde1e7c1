import { describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import {
  FAST_RECOVERY,
  post,
  rebalanceOn,
  sideEffects,
  waitForStatus,
} from './support/demo-cluster.js';
import { useDatabase } from './support/database.js';
import { CSRF, useProxiedOpsNode } from './support/ops-api.js';
import { rawRequest } from './support/raw-request.js';
import { waitFor } from './support/wait-for.js';

const database = useDatabase();

/**
 * The operations API of a real demo node (mounted at /ops), reaching its database through a proxy
 * this file can cut: validation names the field, unknown ids are 404, the cluster and the episodes
 * read true, cancel and retry act, cross-site writes are refused, and a database that is away is a 503.
 */
describe('the operations API', () => {
  // A first retry backoff of 30 s: the listing test finds its retrying episode waiting, not already back.
  const ops = useProxiedOpsNode(database, 'ops-1', {
    ...FAST_RECOVERY,
    DEMO_RETRY_INITIAL_MS: '30000',
  });
  const { call } = ops;
  const ok = async <T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> => {
    const answer = await call(method, path, body);
    if (answer.status >= 300)
      throw new Error(`${method} ${path} → ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body as T;
  };

  it('answers 400 naming the field for every bad query, path id or body', async () => {
    const cases: Array<[method: 'GET' | 'POST', path: string, body: unknown, field: string]> = [
      ['GET', '/episodes?status=nope', undefined, 'status'],
      ['GET', '/episodes?limit=0', undefined, 'limit'],
      ['GET', '/episodes?limit=ten', undefined, 'limit'],
      ['GET', '/episodes?colour=red', undefined, 'colour'],
      ['GET', '/episodes?cursor=not-one-we-gave', undefined, 'cursor'],
      ['GET', '/episodes/not-a-uuid', undefined, 'id'],
      ['POST', '/episodes/not-a-uuid/cancel', undefined, 'id'],
      ['POST', '/episodes/not-a-uuid/retry', undefined, 'id'],
      ['POST', '/episodes/not-a-uuid/archive', undefined, 'id'],
      ['GET', '/cluster?windowMs=soon', undefined, 'windowMs'],
      ['GET', '/cluster?windowMs=0', undefined, 'windowMs'],
      ['POST', '/mode', { mode: 'turbo' }, 'mode'],
      ['POST', '/mode', {}, 'mode'],
      ['POST', '/mode', { mode: 'full', extra: 1 }, 'extra'],
      ['GET', '/trigger-requests?status=lost', undefined, 'status'],
      ['GET', '/workflows?limit=501', undefined, 'limit'],
      ['GET', '/workflows/xyz', undefined, 'id'],
    ];
    for (const [method, path, body, field] of cases) {
      const answer = await call(method, path, body);
      expect({ method, path, status: answer.status }).toEqual({ method, path, status: 400 });
      expect({ method, path, message: [answer.body.message].flat().join('; ') }).toEqual({
        method,
        path,
        message: expect.stringContaining(field),
      });
    }
  });

  it('answers 404 for an id that names nothing', async () => {
    const unknown = randomUUID();
    for (const [method, path] of [
      ['GET', `/episodes/${unknown}`],
      ['POST', `/episodes/${unknown}/cancel`],
      ['POST', `/episodes/${unknown}/retry`],
      ['POST', `/episodes/${unknown}/archive`],
      ['GET', `/workflows/${unknown}`],
    ] as const) {
      expect({ method, path, status: (await call(method, path)).status }).toEqual({
        method,
        path,
        status: 404,
      });
    }
    expect(
      (await fetch(`http://127.0.0.1:${ops.node.port}/ops/assets/nothing-here.js`)).status,
    ).toBe(404);
  });

  it('refuses a state-changing request without its header or from another site', async () => {
    const id = randomUUID();
    expect((await call('POST', `/episodes/${id}/cancel`, undefined, {})).status).toBe(403);
    expect(
      (
        await call('POST', `/episodes/${id}/cancel`, undefined, {
          ...CSRF,
          origin: 'https://elsewhere.example',
        })
      ).status,
    ).toBe(403);
    expect(
      (
        await call('POST', `/episodes/${id}/cancel`, undefined, {
          ...CSRF,
          'sec-fetch-site': 'cross-site',
        })
      ).status,
    ).toBe(403);
    expect((await call('POST', '/mode', { mode: 'disabled' }, {})).status).toBe(403);
    // Origin null: a sandboxed frame or a redirect from another site.
    expect(
      (await call('POST', '/mode', { mode: 'disabled' }, { ...CSRF, origin: 'null' })).status,
    ).toBe(403);
    expect((await ok<{ mode: string }>('GET', '/mode')).mode).toBe('full');
    // A DNS name rebound to this machine is refused for reads and writes (allowedHosts).
    const base = `http://127.0.0.1:${ops.node.port}/ops`;
    const rebound = { ...CSRF, host: `rebound.example:${ops.node.port}` };
    expect((await rawRequest(`${base}/api/cluster`, { headers: rebound })).status).toBe(403);
    expect((await rawRequest(base, { headers: rebound })).status).toBe(403);
    expect(
      (await rawRequest(`${base}/api/episodes/${id}/cancel`, { method: 'POST', headers: rebound }))
        .status,
    ).toBe(403);
    expect(
      (await rawRequest(`${base}/api/cluster`, { headers: { host: 'localhost' } })).status,
    ).toBe(200);
  });

  it('serves the page under a Content-Security-Policy without inline code, that no site may frame', async () => {
    const page = await fetch(`http://127.0.0.1:${ops.node.port}/ops`);
    expect(page.status).toBe(200);
    const policy = page.headers.get('content-security-policy') ?? '';
    expect(policy).toContain("frame-ancestors 'none'");
    expect(policy).toContain("script-src 'self'");
    expect(policy).not.toContain('unsafe-inline');
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    const html = await page.text();
    // Nothing inline that the policy would block: scripts and styles are files.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)|<style|\sstyle=|\son[a-z]+=/i);
  });

  it('lists the node in the cluster, finds the episodes an event caused, and shows one with its journal', async () => {
    const cluster = await ok<{ nodes: Array<{ identity: string; live: boolean; mode: string }> }>(
      'GET',
      '/cluster',
    );
    expect(cluster.nodes).toEqual([
      expect.objectContaining({ identity: 'ops-1', live: true, mode: 'full' }),
    ]);

    const published = await fetch(`http://127.0.0.1:${ops.node.port}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        type: 'resource.rebalance',
        payload: { resource: 'ops-event', stepMs: 10 },
      }),
    });
    const { eventId } = (await published.json()) as { eventId: string };
    const found = await waitFor('the event to have its episode', async () => {
      const page = await ok<{ items: Array<{ id: string; status: string }> }>(
        'GET',
        `/episodes?eventId=${encodeURIComponent(eventId)}`,
      );
      return page.items.length === 1 && page.items[0].status === 'done' ? page.items[0] : undefined;
    }).then((episode) => episode as { id: string });
    expect(
      (await ok<{ items: unknown[] }>('GET', `/episodes?eventId=other-${eventId}`)).items,
    ).toEqual([]);
    const detail = await ok<{ episode: { id: string }; steps: Array<{ name: string }> }>(
      'GET',
      `/episodes/${found.id}`,
    );
    expect(detail.episode.id).toBe(found.id);
    expect(detail.steps.map((s) => s.name)).toEqual(
      expect.arrayContaining(['plan', 'drain', 'move', 'verify', 'report']),
    );
    const actors = await ok<{ items: Array<{ actorId: string }> }>(
      'GET',
      '/episodes?actor=resource_rebalancer&status=done&limit=1',
    );
    expect(actors.items).toEqual([expect.objectContaining({ actorId: 'resource_rebalancer' })]);
  });

  it('lists a preview of each payload, whole only in the detail', async () => {
    const resource = `big-${'x'.repeat(20_000)}`;
    const published = await fetch(`http://127.0.0.1:${ops.node.port}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'resource.updated', payload: { resource, usage: 1 } }),
    });
    const { eventId } = (await published.json()) as { eventId: string };
    type Ref = { payload?: unknown; payloadPreview?: string; payloadChars?: number };
    const listed = await waitFor('the episode listed', async () => {
      const page = await ok<{ items: Array<{ id: string; triggerRef: Ref }> }>(
        'GET',
        `/episodes?eventId=${encodeURIComponent(eventId)}`,
      );
      return page.items[0];
    });
    const whole = JSON.stringify({ resource, usage: 1 });
    expect(listed?.triggerRef).not.toHaveProperty('payload');
    expect(listed?.triggerRef.payloadChars).toBe(whole.length);
    // jsonb orders keys its own way: the preview is the stored JSON's head, 200 characters.
    expect(listed?.triggerRef.payloadPreview).toMatch(/^\{"usage":1,"resource":"big-x+…$/);
    expect(listed?.triggerRef.payloadPreview).toHaveLength(200);
    const detail = await ok<{ episode: { triggerRef: Ref } }>('GET', `/episodes/${listed?.id}`);
    expect(detail.episode.triggerRef.payload).toEqual({ resource, usage: 1 });
  });

  it('cancels a running episode; retry resumes a failed one from its journal in place, and runs a partially failed one anew under its key plus :retry:<n>', async () => {
    const running = await rebalanceOn(ops.node, { resource: 'ops-cancel', stepMs: 2_000 });
    expect(await ok('POST', `/episodes/${running}/cancel`)).toEqual({ result: 'requested' });
    await waitForStatus(database.db, running, 'canceled');

    // A real failure at the third step: plan and drain are journaled.
    const failed = await rebalanceOn(ops.node, {
      resource: 'ops-resume',
      stepMs: 10,
      failAtStep: 3,
      failTimes: 1,
    });
    await waitForStatus(database.db, failed, 'failed');
    const resumed = await call('POST', `/episodes/${failed}/retry`);
    expect(resumed).toEqual({
      status: 202,
      body: { result: 'resumed', dedupeKey: null, episode: { id: failed, status: 'waiting' } },
    });
    expect((await call('POST', `/episodes/${failed}/retry`)).status).toBe(409); // waiting or running now: not failed
    const done = await waitForStatus(database.db, failed, 'done');
    expect(done).toMatchObject({ error_class: null, retries: 0 });
    // Steps before the failure ran once; the one that threw ran again; nothing ran twice.
    expect(await sideEffects(database.db, failed)).toEqual({
      plan: 1,
      drain: 1,
      'move:failed': 1,
      move: 1,
      verify: 1,
      report: 1,
    });
    const marker = await database.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'retry'`,
      [failed],
    );
    expect(marker.rows.map((r) => r.result_ref)).toEqual([
      expect.objectContaining({ manual: true, node: 'ops-1', errorClass: 'crash' }),
    ]);

    const partial = randomUUID();
    await database.db.query(
      `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status, started_at, finished_at)
       VALUES ($1, 'resource_rebalancer', 'rebalance', 'manual', $2, 'ops-partial', 'partially_failed', now(), now())`,
      [partial, JSON.stringify({ type: 'manual', payload: { resource: 'ops-retry', stepMs: 10 } })],
    );
    const first = await call('POST', `/episodes/${partial}/retry`);
    expect(first).toMatchObject({
      status: 201,
      body: { result: 'retried', dedupeKey: 'ops-partial:retry:1' },
    });
    const firstId = (first.body.episode as { id: string }).id;
    await waitForStatus(database.db, firstId, 'done');
    const second = await ok<{ episode: { id: string }; dedupeKey: string }>(
      'POST',
      `/episodes/${partial}/retry`,
    );
    expect(second.dedupeKey).toBe('ops-partial:retry:2');
    expect((await call('POST', `/episodes/${firstId}/retry`)).status).toBe(409);

    // A tampered episode is not run again.
    const tampered = randomUUID();
    await database.db.query(
      `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, trigger_ref, status, error_class, started_at, finished_at)
       VALUES ($1, 'resource_rebalancer', 'rebalance', 'manual', '{"type":"manual","payload":{}}', 'failed', 'tampered', now(), now())`,
      [tampered],
    );
    expect(await call('POST', `/episodes/${tampered}/retry`)).toMatchObject({
      status: 409,
      body: { message: expect.stringContaining('tampered') },
    });

    // Archive frees a key: the next retry takes :retry:1 again; a live episode is 409.
    const live = await rebalanceOn(ops.node, { resource: 'ops-live', stepMs: 2_000 });
    expect((await call('POST', `/episodes/${live}/archive`)).status).toBe(409);
    await ok('POST', `/episodes/${live}/cancel`);
    await waitForStatus(database.db, second.episode.id, 'done');
    expect(await ok('POST', `/episodes/${firstId}/archive`)).toEqual({ result: 'archived' });
    expect(await ok('POST', `/episodes/${firstId}/archive`)).toEqual({
      result: 'already_archived',
    });
    expect(
      (await ok<{ episode: { archivedAt: string | null } }>('GET', `/episodes/${firstId}`)).episode
        .archivedAt,
    ).not.toBeNull();
    const third = await ok<{ dedupeKey: string }>('POST', `/episodes/${partial}/retry`);
    expect(third.dedupeKey).toBe('ops-partial:retry:1');

    expect(await ok('POST', '/mode', { mode: 'trigger_only' })).toEqual(
      expect.objectContaining({ mode: 'trigger_only' }),
    );
    expect((await ok<{ modes: { mode: string } }>('GET', '/node')).modes.mode).toBe('trigger_only');
    await ok('POST', '/mode', { mode: 'full' });
  });

  it('lists what a waiting or deferred episode waits for and when it falls due: a run for later, a sleep, a retry', async () => {
    type Listed = {
      id: string;
      status: string;
      dueAt: string | null;
      waitingFor: string | null;
      retries: number;
    };
    const later = (
      await post<{ episodeId: string }>(ops.node, '/actors/resource_rebalancer/rebalance', {
        payload: { resource: 'ops-later' },
        delayMs: 60_000,
      })
    ).episodeId;
    const sleeping = await rebalanceOn(ops.node, {
      resource: 'ops-sleep',
      stepMs: 10,
      sleepMs: 60_000,
    });
    const retrying = await rebalanceOn(
      ops.node,
      { resource: 'ops-retrying', stepMs: 10, failAtStep: 1 },
      'rebalance_retried',
    );
    const now = Date.now();
    const waits = (await waitFor('all three to wait', async () => {
      const page = await ok<{ items: Listed[] }>('GET', '/episodes?limit=20');
      const found = [later, sleeping, retrying].map((id) => page.items.find((e) => e.id === id));
      return found.every((e) => e?.waitingFor) ? (found as Listed[]) : undefined;
    })) as Listed[];
    expect(waits.map((e) => [e.status, e.waitingFor, e.retries])).toEqual([
      ['deferred', 'start', 0],
      ['waiting', 'sleep', 0],
      ['waiting', 'retry', 1],
    ]);
    const dueIn = waits.map((e) => new Date(e.dueAt as string).getTime() - now);
    expect(dueIn[0]).toBeGreaterThan(50_000);
    expect(dueIn[1]).toBeGreaterThan(50_000);
    expect(dueIn[2]).toBeGreaterThan(20_000);
    const detail = await ok<{ episode: Listed }>('GET', `/episodes/${sleeping}`);
    expect(detail.episode).toMatchObject({ waitingFor: 'sleep', dueAt: waits[1]?.dueAt });
    const done = await ok<{ items: Listed[] }>('GET', '/episodes?status=done&limit=1');
    expect(done.items[0]).toMatchObject({ dueAt: null, waitingFor: null });
    // The wake-ups of the sleep and the backoff are `scheduled`: listed by that filter and counted.
    type Request = { episodeId: string; status: string; error: string | null };
    const requestsOf = async (status: string) =>
      (await ok<{ items: Request[] }>('GET', `/trigger-requests?status=${status}&limit=500`)).items;
    const scheduled = await requestsOf('scheduled');
    expect(scheduled.map((r) => r.episodeId)).toEqual(expect.arrayContaining([sleeping, retrying]));
    expect((await requestsOf('pending')).map((r) => r.episodeId)).toContain(later);
    const counted = await ok<{ triggerRequests: { pending: number; scheduled: number } }>(
      'GET',
      '/cluster',
    );
    expect(counted.triggerRequests.scheduled).toBeGreaterThanOrEqual(2);
    expect(counted.triggerRequests.pending).toBeGreaterThanOrEqual(1);
    for (const id of [later, sleeping, retrying])
      expect((await ok<{ result: string }>('POST', `/episodes/${id}/cancel`)).result).toBe(
        'canceled',
      );
    // Canceled, their wake-ups and the run for later no longer show as due.
    const left = [...(await requestsOf('scheduled')), ...(await requestsOf('pending'))];
    expect(left.filter((r) => [later, sleeping, retrying].includes(r.episodeId))).toEqual([]);
    const ended = (await requestsOf('completed')).filter((r) =>
      [later, sleeping, retrying].includes(r.episodeId),
    );
    expect(ended.map((r) => r.error)).toEqual(Array(3).fill('its episode was canceled'));
  });

  it('answers 503 on every database-backed route while the database is away, and works again after', async () => {
    const id = randomUUID();
    ops.away = true;
    ops.proxy.dropAll();
    try {
      // The cluster read is shared by callers within half a second: the first one after the cut may be the last good one.
      await waitFor(
        'the cluster read to meet the outage',
        async () => (await call('GET', '/cluster')).status === 503,
      );
      for (const [method, path] of [
        ['GET', '/cluster'],
        ['GET', '/nodes'],
        ['GET', '/episodes'],
        ['GET', `/episodes/${id}`],
        ['POST', `/episodes/${id}/cancel`],
        ['POST', `/episodes/${id}/retry`],
        ['POST', `/episodes/${id}/archive`],
        ['GET', '/trigger-requests'],
        ['GET', '/workflows'],
        ['GET', `/workflows/${id}`],
      ] as const) {
        const answer = await call(method, path);
        // Answered by the module's own filter (the demo's global one words it otherwise): a host without one gets the same.
        expect({ method, path, status: answer.status, error: answer.body.error }).toEqual({
          method,
          path,
          status: 503,
          error: 'Service Unavailable',
        });
      }
      // The pulse shares a ping of up to 0.4 s ago, which may predate the cut.
      const pulse = await waitFor('the pulse to meet the outage', async () => {
        const answer = await call('GET', '/pulse');
        return answer.status === 503 ? answer : null;
      });
      expect(pulse?.body.error).toBe('Service Unavailable');
      // This node's own view and its mode live in memory: they still answer.
      expect((await call('GET', '/node')).status).toBe(200);
      expect((await call('GET', '/mode')).status).toBe(200);
    } finally {
      ops.away = false;
    }
    await waitFor(
      'the API to read the database again',
      async () => (await call('GET', '/episodes?limit=1')).status === 200,
    );
    const pulse = await waitFor('the pulse to answer again', async () => {
      const answer = await call('GET', '/pulse');
      return answer.status === 200 ? answer : null;
    });
    expect(pulse?.body).toEqual({ databaseMs: expect.any(Number) });
  });
});
