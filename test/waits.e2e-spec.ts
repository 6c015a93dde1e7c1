import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import {
  Actor,
  Bus,
  ChildEpisodesFailedError,
  EpisodeResultTimeoutError,
  Episodes,
  Expectation,
  onCyclium,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import type pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const runs = new Map<string, number>();
const ran = (key: string) => runs.set(key, (runs.get(key) ?? 0) + 1);

@Injectable()
@Actor({ id: 'approvals', maxConcurrentEpisodes: 20 })
class ApprovalsActor {
  /** Waits for `approve` (or times out), then for a second `approve`, each once. */
  @Expectation({ id: 'approve', trigger: 'manual' })
  async approve(ep: EpisodeContext<{ id: string; timeoutMs?: number }>): Promise<Convergence> {
    const { id, timeoutMs } = ep.trigger.payload;
    await ep.step('before', () => ran(`before:${id}`));
    const first = await ep.waitForSignal<{ by: string }>('approve', { timeoutMs });
    if (first.status === 'timed_out') return { summary: 'timed out', result: { timedOut: true } };
    const second = await ep.waitForSignal<{ by: string }>('approve', { timeoutMs: 60_000 });
    return {
      result: {
        first: first.payload.by,
        second: second.status === 'received' ? second.payload.by : null,
      },
    };
  }

  @Expectation({ id: 'pay', trigger: 'manual' })
  async pay(ep: EpisodeContext<{ orderId: string; timeoutMs?: number }>): Promise<Convergence> {
    const { orderId, timeoutMs } = ep.trigger.payload;
    const settled = await ep.waitForEvent<{ orderId: string; amount: number }>('payment.settled', {
      match: { orderId },
      timeoutMs,
    });
    return {
      result:
        settled.status === 'received'
          ? { amount: settled.event.payload.amount, eventId: settled.event.eventId }
          : { timedOut: true },
    };
  }

  @Expectation({ id: 'fan-out', trigger: 'manual' })
  async fanOut(ep: EpisodeContext<{ n: number; failAt?: number }>): Promise<Convergence> {
    const { n, failAt } = ep.trigger.payload;
    const handles = [];
    for (let i = 0; i < n; i++)
      handles.push(
        await ep.startChild('approvals', 'child', { i, fail: i === failAt }, { key: `c${i}` }),
      );
    ran(`fan-out:${ep.episode.id}`);
    try {
      const done = await ep.waitForChildren(handles);
      return {
        result: {
          sum: done.children.reduce(
            (s, c) => s + Number(c.status === 'done' && (c as { result: number }).result),
            0,
          ),
        },
      };
    } catch (error) {
      if (!(error instanceof ChildEpisodesFailedError)) throw error;
      return { result: { failed: error.failed.map((c) => c.episodeId).length } };
    }
  }

  @Expectation({ id: 'child', trigger: 'manual' })
  async child(ep: EpisodeContext<{ i: number; fail?: boolean }>): Promise<Convergence> {
    ran(`child:${ep.episode.id}`);
    if (ep.trigger.payload.fail) throw new Error('child failed on purpose');
    return { result: ep.trigger.payload.i };
  }
}

/** Signals, event waits, children and results in one process, on a real PostgreSQL. */
describe('waits: signals, events, children and results', () => {
  let url: string;
  let db: pg.Pool;
  let app: INestApplicationContext;
  let episodes: Episodes;
  let bus: Bus;
  let dataSource: DataSource;

  const ended: Array<{ episodeId: string; name: string; outcome: string }> = [];
  const offEnded = onCyclium('episode.wait_ended', (event) => void ended.push(event));

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 3);
    app = await startCycliumApp({
      url,
      cyclium: { nodeIdentity: 'waits-node', workClaims: 'postgres', triggerPollIntervalMs: 500 },
      providers: [ApprovalsActor],
    });
    episodes = app.get(Episodes);
    bus = app.get(Bus);
    dataSource = app.get<DataSource>(getDataSourceToken());
  });

  afterAll(async () => {
    offEnded();
    await app?.close();
    await db?.end();
  });

  const start = async (expectation: string, payload: object): Promise<string> => {
    const started = await episodes.trigger('approvals', expectation, payload);
    if (!('episode' in started)) throw new Error(`not started: ${started.status}`);
    return started.episode.id;
  };
  const statusOf = async (id: string) =>
    (await db.query<{ status: string }>(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]))
      .rows[0]?.status;

  it('waits for a signal without a slot or claim, and resumes with it; two signals feed two waits', async () => {
    const id = await start('approve', { id: 'a1' });
    await waitFor('the episode to wait', async () => (await statusOf(id)) === 'waiting');
    const row = (await episodes.get(id))!;
    expect(row.waitingFor).toMatchObject({ kind: 'signal', name: 'approve', deadline: null });
    expect(row.ownerNode).toBeNull();
    const claims = await db.query(
      `SELECT 1 FROM cyclium_work_claims WHERE dedupe_key LIKE '%' || $1 || '%' AND state = 'claimed'`,
      [id],
    );
    expect(claims.rowCount).toBe(0);
    expect(await episodes.signal(id, 'approve', { by: 'ann' })).toMatchObject({
      status: 'sent',
      woke: true,
    });
    expect(await episodes.signal(id, 'approve', { by: 'bob' })).toMatchObject({ status: 'sent' });
    const outcome = await episodes.result(id, { timeoutMs: 10_000 });
    expect(outcome).toMatchObject({ status: 'done', result: { first: 'ann', second: 'bob' } });
    expect(ended.filter((e) => e.episodeId === id).map((e) => [e.name, e.outcome])).toEqual([
      ['signal:approve', 'received'],
      ['signal:approve', 'received'],
    ]);
    expect(runs.get('before:a1')).toBe(1);
    const delivered = await db.query(
      `SELECT count(*)::int AS n FROM cyclium_signals WHERE episode_id = $1 AND delivered_at IS NOT NULL`,
      [id],
    );
    expect(delivered.rows[0]).toEqual({ n: 2 });
  });

  it('keeps a signal sent before the wait began', async () => {
    const id = await start('approve', { id: 'a2' });
    // Sent at once: the episode is still running its first step, or already waiting.
    expect((await episodes.signal(id, 'approve', { by: 'early' })).status).toBe('sent');
    await episodes.signal(id, 'approve', { by: 'later' });
    expect(await episodes.result(id, { timeoutMs: 10_000 })).toMatchObject({
      status: 'done',
      result: { first: 'early', second: 'later' },
    });
  });

  it('ends a wait by its timeout branch when no signal comes', async () => {
    const id = await start('approve', { id: 'a3', timeoutMs: 1_000 });
    const began = Date.now();
    expect(await episodes.result(id, { timeoutMs: 10_000 })).toMatchObject({
      status: 'done',
      result: { timedOut: true },
    });
    expect(Date.now() - began).toBeGreaterThanOrEqual(1_000);
  });

  it('signals in a host transaction count only once committed', async () => {
    const id = await start('approve', { id: 'a4' });
    await waitFor('the episode to wait', async () => (await statusOf(id)) === 'waiting');
    await expect(
      dataSource.transaction(async (manager) => {
        await episodes.signal(id, 'approve', { by: 'rolled' }, { manager });
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    await expect(episodes.result(id, { timeoutMs: 1_500 })).rejects.toBeInstanceOf(
      EpisodeResultTimeoutError,
    );
    await dataSource.transaction((manager) =>
      episodes.signal(id, 'approve', { by: 'committed' }, { manager }),
    );
    await episodes.signal(id, 'approve', { by: 'second' });
    expect(await episodes.result(id, { timeoutMs: 10_000 })).toMatchObject({
      result: { first: 'committed', second: 'second' },
    });
  });

  it('answers not_found and finished', async () => {
    expect(await episodes.signal('00000000-0000-4000-8000-000000000000', 'x', {})).toEqual({
      status: 'not_found',
    });
    const id = await start('approve', { id: 'a5', timeoutMs: 0 });
    await episodes.result(id, { timeoutMs: 10_000 });
    expect(await episodes.signal(id, 'approve', {})).toEqual({ status: 'finished' });
  });

  it('wakes an event wait on its own matching event only, committed after the wait', async () => {
    await bus.publish('payment.settled', { orderId: 'o-early', amount: 1 });
    const ids = await Promise.all(
      ['o-1', 'o-2', 'o-early'].map((orderId) => start('pay', { orderId, timeoutMs: 4_000 })),
    );
    await waitFor('all three to wait', async () =>
      (await Promise.all(ids.map(statusOf))).every((s) => s === 'waiting'),
    );
    await bus.publish('payment.settled', { orderId: 'o-other', amount: 9 });
    await bus.publish('payment.settled', { orderId: 'o-2', amount: 2 });
    await bus.publish('payment.settled', { orderId: 'o-1', amount: 1 });
    await bus.publish('payment.settled', { orderId: 'o-1', amount: 100 });
    const [one, two, early] = await Promise.all(
      ids.map((id) => episodes.result(id, { timeoutMs: 10_000 })),
    );
    expect(one?.result).toMatchObject({ amount: 1 });
    expect(two?.result).toMatchObject({ amount: 2 });
    expect(early?.result).toEqual({ timedOut: true });
  });

  it('fans out to children across the pool, wakes the parent once, and returns their results', async () => {
    const id = await start('fan-out', { n: 20 });
    const outcome = await episodes.result(id, { timeoutMs: 30_000 });
    expect(outcome).toMatchObject({ status: 'done', result: { sum: 190 } });
    const children = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_episodes WHERE trigger_ref->'parent'->>'episodeId' = $1
          AND status = 'done'`,
      [id],
    );
    expect(children.rows[0]?.n).toBe(20);
    // Started the children once, woke once for all of them.
    expect(runs.get(`fan-out:${id}`)).toBe(2);
    const wakes = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_trigger_requests WHERE episode_id = $1`,
      [id],
    );
    expect(wakes.rows[0]?.n).toBe(1);
  });

  it('hands a failed child to the parent as a typed error it can catch', async () => {
    const id = await start('fan-out', { n: 3, failAt: 1 });
    expect(await episodes.result(id, { timeoutMs: 30_000 })).toMatchObject({
      status: 'done',
      result: { failed: 1 },
    });
  });

  it('cancels a waiting parent and its live children', async () => {
    const id = await start('approve', { id: 'p-cancel' });
    await waitFor('the episode to wait', async () => (await statusOf(id)) === 'waiting');
    expect(await episodes.cancel(id)).toBe('canceled');
    expect(await episodes.result(id, { timeoutMs: 5_000 })).toMatchObject({ status: 'canceled' });
  });
});
