import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ConsoleLogger, Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  InvalidTriggerError,
  type Convergence,
  type EpisodeContext,
  type CycliumOptions,
} from '@cyclium/nestjs';
import pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { waitFor } from './support/wait-for.js';
import {
  FLOW_AUDIT,
  allDone as allDoneIn,
  audited,
  peak,
  type AuditedJob,
} from './support/flow-audit.js';

interface Job extends AuditedJob {
  ms?: number;
  /** Sleeps this long (durably) between two halves of its run. */
  sleepMs?: number;
}

/** The audit pool the actors write to; set in beforeAll. */
let audit: pg.Pool;

const pause = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

@Injectable()
@Actor({ id: 'flow', maxConcurrentEpisodes: 8 })
class FlowActor {
  @Expectation({
    id: 'per-customer',
    trigger: 'manual',
    concurrency: { limit: 2, key: (p: Job) => p.customer ?? null, total: 4 },
  })
  perCustomer(ep: EpisodeContext<Job>): Promise<Convergence> {
    return audited(audit, ep, () => pause(ep.trigger.payload.ms ?? 50));
  }

  @Expectation({ id: 'global', trigger: 'manual', concurrency: { limit: 3 } })
  global(ep: EpisodeContext<Job>): Promise<Convergence> {
    return audited(audit, ep, () => pause(ep.trigger.payload.ms ?? 50));
  }

  @Expectation({ id: 'one', trigger: 'manual', concurrency: { limit: 1 } })
  async one(ep: EpisodeContext<Job>): Promise<Convergence> {
    const { sleepMs, ms } = ep.trigger.payload;
    // Each run is audited on its own: the first ends where the sleep begins, the resumed one runs
    // its pause again and replays the sleep.
    const converged = await audited(audit, ep, () => pause(ms ?? 20));
    if (sleepMs) await ep.sleep('nap', sleepMs);
    return converged;
  }

  @Expectation({ id: 'rated', trigger: 'manual', rateLimit: { limit: 10, periodMs: 1_000 } })
  rated(ep: EpisodeContext<Job>): Promise<Convergence> {
    return audited(audit, ep, () => pause(ep.trigger.payload.ms ?? 10));
  }
}

describe.each<{ claims: CycliumOptions['workClaims'] }>([
  { claims: 'postgres' },
  { claims: false },
])('flow control across two nodes (workClaims: $claims)', ({ claims }) => {
  // Without claims the admission goes one row per transaction (EpisodeRunner.beginAdmitted): the
  // limits, priority, wake-ups and cancels are checked on that path too; fairness, the keyless cap
  // and the rate window depend on nothing of the claims and run once, with them.
  const withClaimsOnly = claims ? it : it.skip;
  let url: string;
  let db: pg.Pool;
  let nodes: INestApplicationContext[] = [];
  let episodes: Episodes;

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 4);
    audit = pool(url, 12);
    await db.query(FLOW_AUDIT);
    nodes = await Promise.all(
      ['flow-a', 'flow-b'].map((nodeIdentity) =>
        startCycliumApp({
          url,
          cyclium: { nodeIdentity, workClaims: claims, triggerPollIntervalMs: 300 },
          providers: [FlowActor],
          poolSize: 8,
          logger: process.env.FLOW_LOG ? new ConsoleLogger() : undefined,
        }),
      ),
    );
    episodes = nodes[0]!.get(Episodes);
  });

  afterAll(async () => {
    for (const node of nodes) await node.close();
    await db?.end();
    await audit?.end();
  });

  const trigger = async (expectation: string, job: Job, priority?: number) => {
    const node = nodes[Math.floor(Math.random() * nodes.length)]!;
    const result = await node
      .get(Episodes)
      .trigger('flow', expectation, job, priority === undefined ? {} : { priority });
    if (!('episode' in result)) throw new Error(`not accepted: ${result.status}`);
    return result.episode.id;
  };
  const allDone = (ids: string[], timeoutMs?: number) => allDoneIn(db, ids, timeoutMs);

  it('keeps each customer at 2 running and all customers at 4, across both nodes', async () => {
    const ids = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        trigger('per-customer', { run: 'keyed', customer: `c${i % 5}`, ms: 60 }),
      ),
    );
    const first = (await episodes.get(ids[0]!))!;
    expect(['throttled', 'running', 'done']).toContain(first.status);
    await allDone(ids);
    expect(await peak(db, 'keyed', true)).toBeLessThanOrEqual(2);
    expect(await peak(db, 'keyed')).toBeLessThanOrEqual(4);
    // The limit was reached, not just respected by running one at a time.
    expect(await peak(db, 'keyed')).toBeGreaterThanOrEqual(3);
    const { rows } = await db.query<{ flow_key: string }>(
      `SELECT DISTINCT flow_key FROM cyclium_episodes WHERE id = ANY($1::uuid[]) ORDER BY 1`,
      [ids],
    );
    expect(rows.map((r) => r.flow_key)).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
  });

  withClaimsOnly('caps an expectation without a key cluster-wide, not per node', async () => {
    const ids = await Promise.all(
      Array.from({ length: 30 }, () => trigger('global', { run: 'global', ms: 80 })),
    );
    await allDone(ids);
    expect(await peak(db, 'global')).toBe(3);
  });

  it('starts a higher priority next, before an older backlog', async () => {
    // It runs until all 21 are in: 21 triggers in a row take over a second on a loaded machine.
    const blocker = await trigger('one', { run: 'prio', ms: 5_000 });
    await waitFor(
      'the first to run',
      async () => (await episodes.get(blocker))?.status === 'running',
    );
    const backlog = [];
    for (let i = 0; i < 20; i++) backlog.push(await trigger('one', { run: 'prio', ms: 1 }));
    const urgent = await trigger('one', { run: 'prio', ms: 1 }, 10);
    await allDone([blocker, ...backlog, urgent]);
    const { rows } = await db.query<{ episode_id: string }>(
      `SELECT episode_id FROM flow_audit WHERE run = 'prio' ORDER BY started_at LIMIT 2`,
    );
    expect(rows.map((r) => r.episode_id)).toEqual([blocker, urgent]);
    expect(await peak(db, 'prio')).toBe(1);
  });

  withClaimsOnly(
    'serves a small customer before more of a busy one (round robin across keys)',
    async () => {
      const a = await Promise.all(
        Array.from({ length: 120 }, () =>
          trigger('per-customer', { run: 'fair', customer: 'A', ms: 30 }),
        ),
      );
      await waitFor('A to run', async () => (await peak(db, 'fair')) > 0);
      const b = [];
      for (let i = 0; i < 10; i++)
        b.push(await trigger('per-customer', { run: 'fair', customer: 'B', ms: 30 }));
      await allDone([...a, ...b], 60_000);
      const { rows } = await db.query<{ customer: string }>(
        `SELECT customer FROM flow_audit WHERE run = 'fair'
          AND started_at >= (SELECT min(started_at) FROM flow_audit
                              WHERE run = 'fair' AND customer = 'B')
          ORDER BY started_at`,
      );
      const customers = rows.map((r) => r.customer);
      const lastB = customers.lastIndexOf('B');
      expect(customers.filter((c) => c === 'B')).toHaveLength(10);
      // B's 10 started before A's next 20 (those of A that started between B's first and last).
      expect(customers.slice(0, lastB).filter((c) => c === 'A').length).toBeLessThan(20);
    },
  );

  it('does not count a sleeping episode; once awake it waits for the limit again', async () => {
    const sleeper = await trigger('one', { run: 'sleep', sleepMs: 600, ms: 1 });
    await waitFor(
      'the sleeper to sleep',
      async () => (await episodes.get(sleeper))?.status === 'waiting',
    );
    const other = await trigger('one', { run: 'sleep', ms: 1_500 });
    await waitFor(
      'the other to run',
      async () => (await episodes.get(other))?.status === 'running',
    );
    await waitFor(
      'the sleeper to wake into throttled',
      async () => (await episodes.get(sleeper))?.status === 'throttled',
    );
    await allDone([sleeper, other]);
    expect(await peak(db, 'sleep')).toBe(1);
    const steps = await episodes.steps(sleeper);
    expect(steps.filter((s) => s.name === 'woken').length).toBeGreaterThanOrEqual(1);
  });

  it('cancels a throttled episode, which never runs', async () => {
    const blocker = await trigger('one', { run: 'cancel', ms: 800 });
    const waiting = await trigger('one', { run: 'cancel', ms: 1 });
    await waitFor(
      'the second to be throttled',
      async () => (await episodes.get(waiting))?.status === 'throttled',
    );
    expect(await episodes.cancel(waiting)).toBe('canceled');
    await allDone([blocker]);
    const { rows } = await db.query(`SELECT 1 FROM flow_audit WHERE episode_id = $1`, [waiting]);
    expect(rows).toHaveLength(0);
  });

  it('a run for later of a limited expectation is throttled when due, then admitted', async () => {
    const result = await episodes.trigger('flow', 'one', { run: 'later' }, { delayMs: 200 });
    expect(result.status).toBe('deferred');
    const id = (result as { episode: { id: string } }).episode.id;
    await allDone([id]);
  });

  withClaimsOnly(
    'allows at most `limit` starts in any window of `periodMs`, and keeps up with it',
    async () => {
      const ids = await Promise.all(
        Array.from({ length: 35 }, () => trigger('rated', { run: 'rated' })),
      );
      await allDone(ids, 30_000);
      const { rows } = await db.query<{ n: number }>(
        `SELECT max((SELECT count(*) FROM cyclium_episodes b
                      WHERE b.id = ANY($1::uuid[]) AND b.started_at >= a.started_at
                        AND b.started_at < a.started_at + interval '1 second'))::int AS n
           FROM cyclium_episodes a WHERE a.id = ANY($1::uuid[])`,
        [ids],
      );
      expect(rows[0]!.n).toBeLessThanOrEqual(10);
      const span = await db.query<{ s: number }>(
        `SELECT extract(epoch FROM max(started_at) - min(started_at))::float8 AS s
           FROM cyclium_episodes WHERE id = ANY($1::uuid[])`,
        [ids],
      );
      // 35 starts at 10 a second: 3 full windows after the first start, and not much more.
      expect(span.rows[0]!.s).toBeGreaterThanOrEqual(2.9);
      expect(span.rows[0]!.s).toBeLessThan(3.6);
    },
  );

  it('refuses a bad priority before writing anything', async () => {
    await expect(
      episodes.trigger('flow', 'one', { run: 'bad' }, { priority: 1.5 }),
    ).rejects.toThrow(InvalidTriggerError);
  });
});
