import { describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import {
  FAST_RECOVERY,
  episodeRow,
  post,
  rebalanceOn,
  waitForStatus,
  type Rebalance,
} from './support/demo-cluster.js';
import { useDatabase } from './support/database.js';
import { CSRF, useProxiedOpsNode } from './support/ops-api.js';
import { waitFor } from './support/wait-for.js';

interface BulkAnswer {
  matched: number;
  done: Record<string, number>;
  refused: Array<{ id: string; reason: string; message: string }>;
  more: boolean;
}

const database = useDatabase();

/**
 * The bulk routes of the operations API on a real demo node (mounted at /ops), reaching its
 * database through a proxy this file can cut: retry-matching and cancel-matching act on the newest
 * `limit` episodes the list's filters match, each as its single route would, report what they
 * refused, and log each action with the operator's reason.
 */
describe('bulk retry and cancel in the operations API', () => {
  const ops = useProxiedOpsNode(database, 'bulk-1', FAST_RECOVERY);
  const { call } = ops;
  const bulk = async (action: 'retry' | 'cancel', body: unknown): Promise<BulkAnswer> => {
    const answer = await call('POST', `/episodes/${action}-matching`, body);
    if (answer.status !== 200)
      throw new Error(`${action}-matching → ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body as unknown as BulkAnswer;
  };

  /** Rebalances that fail at their first step once (no retries): failed now, done once resumed. */
  const failedRebalances = async (count: number, resource: string): Promise<string[]> => {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const payload: Rebalance = { resource: `${resource}-${i}`, stepMs: 10 };
      const answer = await post<{ status: string; episodeId: string | null }>(
        ops.node,
        '/actors/resource_rebalancer/rebalance',
        { payload: { ...payload, failAtStep: 1, failTimes: 1 } },
      );
      if (!answer.episodeId) throw new Error(`rebalance ${i} was ${answer.status}`);
      ids.push(answer.episodeId);
    }
    for (const id of ids) await waitForStatus(database.db, id, 'failed');
    return ids;
  };

  /** A finished row written as it stands, for what a run cannot easily leave behind. */
  const insertFinished = async (row: {
    actor: string;
    expectation: string;
    status: 'failed' | 'partially_failed';
    errorClass?: string;
    dedupeKey?: string;
    eventId?: string;
    payload?: Rebalance;
  }): Promise<string> => {
    const id = randomUUID();
    const trigger = row.eventId
      ? { type: 'event', eventType: 'resource.rebalance', eventId: row.eventId }
      : { type: 'manual' };
    await database.db.query(
      `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, trigger_ref,
         dedupe_key, status, error_class, started_at, finished_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())`,
      [
        id,
        row.actor,
        row.expectation,
        trigger.type,
        JSON.stringify({ ...trigger, payload: row.payload ?? {} }),
        row.dedupeKey ?? null,
        row.status,
        row.errorClass ?? (row.status === 'failed' ? 'crash' : null),
      ],
    );
    return id;
  };

  const statusOf = async (id: string) => (await episodeRow(database.db, id)).status as string;
  const logged = (text: string) =>
    waitFor(
      `the node to log ${JSON.stringify(text)}`,
      () => ops.node.output().includes(text),
      5_000,
    );

  it('retries every failed episode of one actor in one call, leaving the failed episodes of other actors as they are', async () => {
    const failed = await failedRebalances(20, 'bulk-20');
    const partial = await insertFinished({
      actor: 'resource_rebalancer',
      expectation: 'rebalance',
      status: 'partially_failed',
      dedupeKey: 'bulk-partial',
      payload: { resource: 'bulk-partial', stepMs: 10 },
    });
    const others = [
      await insertFinished({
        actor: 'resource_monitor',
        expectation: 'check_resource_limits',
        status: 'failed',
      }),
      await insertFinished({
        actor: 'resource_advisor',
        expectation: 'summarize',
        status: 'failed',
      }),
    ];
    const before = await database.db.query(
      `SELECT id, status, updated_at FROM cyclium_episodes WHERE id = ANY($1::uuid[]) ORDER BY id`,
      [others],
    );

    const answer = await bulk('retry', { actor: 'resource_rebalancer', reason: 'disk replaced' });

    expect(answer).toEqual({
      matched: 21,
      done: { resumed: 20, retried: 1 },
      refused: [],
      more: false,
    });
    for (const id of failed) await waitForStatus(database.db, id, 'done');
    const again = await database.db.query(
      `SELECT id, status FROM cyclium_episodes WHERE dedupe_key = 'bulk-partial:retry:1'`,
    );
    expect(again.rows).toHaveLength(1);
    await waitForStatus(database.db, again.rows[0].id as string, 'done');
    expect(await statusOf(partial)).toBe('partially_failed');
    const after = await database.db.query(
      `SELECT id, status, updated_at FROM cyclium_episodes WHERE id = ANY($1::uuid[]) ORDER BY id`,
      [others],
    );
    expect(after.rows).toEqual(before.rows);
    expect(after.rows.map((r) => r.status)).toEqual(['failed', 'failed']);
    // Each run again is logged with its episode and the reason, and the call once in all.
    for (const id of failed)
      await logged(`episode ${id} (resource_rebalancer.rebalance) (failed as crash) resumes from`);
    await logged(`runs again under bulk-partial:retry:1 as episode ${again.rows[0].id}`);
    const reasoned = ops.node
      .output()
      .split('\n')
      .filter((line) => line.includes('retried by an operator, reason "disk replaced"'));
    expect(reasoned).toHaveLength(21);
    expect(reasoned.filter((line) => line.includes(`episode ${partial} `))).toEqual([
      expect.stringContaining(
        `runs again under bulk-partial:retry:1 as episode ${again.rows[0].id}`,
      ),
    ]);
    // A resumed episode's journal keeps the reason with the retry.
    const markers = await database.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = ANY($1::uuid[]) AND name = 'retry'`,
      [failed],
    );
    expect(markers.rows.map((r) => r.result_ref)).toEqual(
      Array(20).fill(expect.objectContaining({ manual: true, reason: 'disk replaced' })),
    );
    await logged(
      'retry-matching {"actorId":"resource_rebalancer","statuses":["failed","partially_failed"]} by an operator, reason "disk replaced": 21 matched (20 resumed, 1 retried, 0 refused)',
    );
  });

  it('acts on the newest `limit` matching episodes and says when more match', async () => {
    const failed = await failedRebalances(5, 'bulk-limit');
    const filter = { actor: 'resource_rebalancer', status: 'failed' };

    const first = await bulk('retry', { ...filter, limit: 3 });

    expect(first).toEqual({
      matched: 3,
      done: { resumed: 3, retried: 0 },
      refused: [],
      more: true,
    });
    // Newest first: the two oldest are left failed.
    expect(await statusOf(failed[0] as string)).toBe('failed');
    expect(await statusOf(failed[1] as string)).toBe('failed');
    for (const id of failed.slice(2)) expect(await statusOf(id)).not.toBe('failed');

    const second = await bulk('retry', { ...filter, limit: 3 });

    expect(second).toEqual({
      matched: 2,
      done: { resumed: 2, retried: 0 },
      refused: [],
      more: false,
    });
    for (const id of failed) await waitForStatus(database.db, id, 'done');
    expect(await bulk('retry', filter)).toEqual({
      matched: 0,
      done: { resumed: 0, retried: 0 },
      refused: [],
      more: false,
    });
  });

  it('reports the episodes it may not retry and retries the rest', async () => {
    const eventId = `bulk-refusals-${randomUUID()}`;
    const good = await insertFinished({
      actor: 'resource_rebalancer',
      expectation: 'rebalance',
      status: 'failed',
      eventId,
      payload: { resource: 'bulk-refusals', stepMs: 10 },
    });
    const tampered = await insertFinished({
      actor: 'resource_rebalancer',
      expectation: 'rebalance',
      status: 'failed',
      errorClass: 'tampered',
      eventId,
    });
    const notHosted = await insertFinished({
      actor: 'retired_actor',
      expectation: 'gone',
      status: 'failed',
      eventId,
    });

    const answer = await bulk('retry', { eventId });

    expect({
      ...answer,
      refused: [...answer.refused].sort((a, b) => (a.id < b.id ? -1 : 1)),
    }).toEqual({
      matched: 3,
      done: { resumed: 1, retried: 0 },
      refused: [
        {
          id: tampered,
          reason: 'tampered',
          message: expect.stringContaining('failed as tampered'),
        },
        {
          id: notHosted,
          reason: 'not_hosted',
          message: expect.stringContaining('is not declared on this node'),
        },
      ].sort((a, b) => (a.id < b.id ? -1 : 1)),
      more: false,
    });
    await waitForStatus(database.db, good, 'done');
    expect(await statusOf(tampered)).toBe('failed');
    expect(await statusOf(notHosted)).toBe('failed');
  });

  it('cancels the waiting episodes of a filter, then every live one: those not started at once, a running one at its next step', async () => {
    const sleeping: string[] = [];
    for (let i = 0; i < 3; i++)
      sleeping.push(
        await rebalanceOn(ops.node, { resource: `bulk-sleep-${i}`, stepMs: 10, sleepMs: 60_000 }),
      );
    const later: string[] = [];
    for (let i = 0; i < 2; i++)
      later.push(
        (
          await post<{ episodeId: string }>(ops.node, '/actors/resource_rebalancer/rebalance', {
            payload: { resource: `bulk-later-${i}` },
            delayMs: 60_000,
          })
        ).episodeId,
      );
    const running = await rebalanceOn(ops.node, { resource: 'bulk-running', stepMs: 2_000 });
    for (const id of sleeping) await waitForStatus(database.db, id, 'waiting');
    for (const id of later) expect(await statusOf(id)).toBe('deferred');
    const reason = 'maintenance window';

    const waiting = await bulk('cancel', {
      actor: 'resource_rebalancer',
      status: 'waiting',
      reason,
    });

    expect(waiting).toEqual({
      matched: 3,
      done: { canceled: 3, requested: 0 },
      refused: [],
      more: false,
    });
    for (const id of sleeping) expect(await statusOf(id)).toBe('canceled');
    for (const id of later) expect(await statusOf(id)).toBe('deferred');
    expect(await statusOf(running)).toBe('running');

    // No status: every status an episode has not ended in, and none it has (the done and failed
    // episodes of the tests above match the actor too).
    const live = await bulk('cancel', { actor: 'resource_rebalancer', reason });

    expect(live).toEqual({
      matched: 3,
      done: { canceled: 2, requested: 1 },
      refused: [],
      more: false,
    });
    for (const id of later) expect(await statusOf(id)).toBe('canceled');
    await waitForStatus(database.db, running, 'canceled');
    for (const id of [...sleeping, ...later])
      await logged(`episode ${id} canceled by an operator, reason "maintenance window"`);
    await logged(
      `episode ${running}: cancel requested by an operator, reason "maintenance window"`,
    );
  });

  it('answers 400 naming the field for a status the action cannot act on, a bad limit or reason, or an unknown field', async () => {
    const id = randomUUID();
    const cases: Array<[path: string, body: unknown, field: string]> = [
      ['/episodes/retry-matching', { status: 'running' }, 'status'],
      ['/episodes/retry-matching', { status: 'done' }, 'status'],
      ['/episodes/retry-matching', { status: 'nope' }, 'status'],
      ['/episodes/cancel-matching', { status: 'failed' }, 'status'],
      ['/episodes/cancel-matching', { status: 'canceled' }, 'status'],
      ['/episodes/retry-matching', { limit: 0 }, 'limit'],
      ['/episodes/retry-matching', { limit: 501 }, 'limit'],
      ['/episodes/retry-matching', { limit: 2.5 }, 'limit'],
      ['/episodes/cancel-matching', { limit: '10' }, 'limit'],
      ['/episodes/cancel-matching', { limit: null }, 'limit'],
      ['/episodes/retry-matching', { reason: '' }, 'reason'],
      ['/episodes/cancel-matching', { reason: 'x'.repeat(501) }, 'reason'],
      ['/episodes/cancel-matching', { reason: 42 }, 'reason'],
      // Null is not "no filter": it would widen the action to every actor.
      ['/episodes/cancel-matching', { actor: null }, 'actor'],
      ['/episodes/retry-matching', { env: '' }, 'env'],
      ['/episodes/retry-matching', { colour: 'red' }, 'colour'],
      ['/episodes/cancel-matching', { actor: 'resource_rebalancer', cursor: 'abc' }, 'cursor'],
      [`/episodes/${id}/cancel`, { reason: '' }, 'reason'],
      [`/episodes/${id}/retry`, { reason: 'x'.repeat(501) }, 'reason'],
      [`/episodes/${id}/archive`, { note: 'why not' }, 'note'],
    ];
    for (const [path, body, field] of cases) {
      const answer = await call('POST', path, body);
      const message = [answer.body.message].flat().join('; ');
      expect({ path, body, status: answer.status }).toEqual({ path, body, status: 400 });
      expect({ path, body, message }).toEqual({
        path,
        body,
        message: expect.stringContaining(field),
      });
    }
    // A reason of 500 characters is one: the episode is what is missing.
    expect((await call('POST', `/episodes/${id}/cancel`, { reason: 'x'.repeat(500) })).status).toBe(
      404,
    );
  });

  it('refuses a bulk action without the header or from another site, and acts on nothing', async () => {
    const [failed] = await failedRebalances(1, 'bulk-guard');
    const filter = { actor: 'resource_rebalancer', status: 'failed' };
    for (const headers of [
      {},
      { ...CSRF, origin: 'https://elsewhere.example' },
      { ...CSRF, 'sec-fetch-site': 'cross-site' },
    ]) {
      expect((await call('POST', '/episodes/retry-matching', filter, headers)).status).toBe(403);
      expect((await call('POST', '/episodes/cancel-matching', {}, headers)).status).toBe(403);
    }
    expect(await statusOf(failed as string)).toBe('failed');
    expect((await bulk('retry', filter)).done).toEqual({ resumed: 1, retried: 0 });
    await waitForStatus(database.db, failed as string, 'done');
  });

  it('logs the reason of a single cancel, retry and archive with the episode, on one line', async () => {
    const [failed] = (await failedRebalances(1, 'bulk-single')) as [string];
    expect(
      await call('POST', `/episodes/${failed}/retry`, { reason: 'flaky disk\nline two' }),
    ).toMatchObject({ status: 202, body: { result: 'resumed' } });
    await logged(
      `episode ${failed} (resource_rebalancer.rebalance) (failed as crash) resumes from`,
    );
    await logged(`retried by an operator, reason "flaky disk\\nline two"`);
    const marker = await database.db.query(
      `SELECT result_ref FROM cyclium_episode_steps WHERE episode_id = $1 AND name = 'retry'`,
      [failed],
    );
    expect(marker.rows[0]?.result_ref).toMatchObject({ reason: 'flaky disk\nline two' });
    // The reason's line break is quoted: it starts no line of its own.
    expect(
      ops.node
        .output()
        .split('\n')
        .some((line) => line.startsWith('line two')),
    ).toBe(false);
    await waitForStatus(database.db, failed, 'done');
    expect(await call('POST', `/episodes/${failed}/archive`, { reason: 'cleared' })).toEqual({
      status: 200,
      body: { result: 'archived' },
    });
    await logged(`episode ${failed} archived by an operator, reason "cleared"`);

    const sleeping = await rebalanceOn(ops.node, {
      resource: 'bulk-one',
      stepMs: 10,
      sleepMs: 60_000,
    });
    await waitForStatus(database.db, sleeping, 'waiting');
    expect(await call('POST', `/episodes/${sleeping}/cancel`, { reason: 'not needed' })).toEqual({
      status: 200,
      body: { result: 'canceled' },
    });
    await logged(`episode ${sleeping} canceled by an operator, reason "not needed"`);
    // With no reason (the page's `{}`; test/ops-api.e2e-spec.ts sends no body at all).
    const other = await rebalanceOn(ops.node, {
      resource: 'bulk-two',
      stepMs: 10,
      sleepMs: 60_000,
    });
    await waitForStatus(database.db, other, 'waiting');
    expect(await call('POST', `/episodes/${other}/cancel`, {})).toEqual({
      status: 200,
      body: { result: 'canceled' },
    });
    await logged(`episode ${other} canceled by an operator`);
    expect(
      ops.node
        .output()
        .split('\n')
        .filter((line) => line.includes(`episode ${other} canceled`)),
    ).toEqual([expect.stringMatching(/canceled by an operator$/)]);
  });

  it('answers 503 while the database is away, and acts again once it is back', async () => {
    const [failed] = (await failedRebalances(1, 'bulk-away')) as [string];
    const filter = { actor: 'resource_rebalancer', status: 'failed', limit: 500 };
    ops.away = true;
    ops.proxy.dropAll();
    try {
      for (const path of ['/episodes/retry-matching', '/episodes/cancel-matching'])
        await waitFor(`${path} to meet the outage`, async () => {
          const answer = await call('POST', path, path.includes('retry') ? filter : {});
          return answer.status === 503 && answer.body.error === 'Service Unavailable';
        });
    } finally {
      ops.away = false;
    }
    await waitFor('the bulk retry to act again', async () => {
      const answer = await call('POST', '/episodes/retry-matching', filter);
      return answer.status === 200;
    });
    await waitForStatus(database.db, failed, 'done');
  });
});
