import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import pg from 'pg';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { FLOW_AUDIT, allDone, audited, peak, type AuditedJob } from './support/flow-audit.js';

/**
 * How a limited episode starts without a backlog (inserted running when its limits allow it) and
 * how a freed place reaches a throttled row: the trigger poll is an hour away here, so only the
 * starts in the insert, the flow queue of the node that throttled a row, and the end of a running
 * episode (which asks in its own statement whether anything is throttled, and looks when it is)
 * can start anything.
 */
interface Job extends AuditedJob {
  ms: number;
}

let audit: pg.Pool;

const pause = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

@Injectable()
@Actor({ id: 'starts', maxConcurrentEpisodes: 8 })
class StartsActor {
  @Expectation({
    id: 'keyed',
    trigger: 'manual',
    concurrency: { limit: 2, key: (p: Job) => p.customer ?? null },
  })
  keyed(ep: EpisodeContext<Job>): Promise<Convergence> {
    return this.audited(ep);
  }

  @Expectation({ id: 'one', trigger: 'manual', concurrency: { limit: 1 } })
  one(ep: EpisodeContext<Job>): Promise<Convergence> {
    return this.audited(ep);
  }

  private audited(ep: EpisodeContext<Job>): Promise<Convergence> {
    return audited(audit, ep, () => pause(ep.trigger.payload.ms));
  }
}

describe('limited starts without a backlog, and the place an end frees', () => {
  let db: pg.Pool;
  let a: INestApplicationContext;
  let b: INestApplicationContext;

  beforeAll(async () => {
    const url = await freshDatabase();
    db = pool(url, 4);
    audit = pool(url, 8);
    await db.query(FLOW_AUDIT);
    [a, b] = await Promise.all(
      ['starts-a', 'starts-b'].map((nodeIdentity) =>
        startCycliumApp({
          url,
          cyclium: { nodeIdentity, workClaims: 'postgres', triggerPollIntervalMs: 3_600_000 },
          providers: [StartsActor],
          poolSize: 6,
        }),
      ),
    );
  });

  afterAll(async () => {
    await a?.close();
    await b?.close();
    await db?.end();
    await audit?.end();
  });

  it('starts in their insert the triggers the limits allow, and only those', async () => {
    const episodes = a.get(Episodes);
    // Two customers at once: each gets its 2 places in the insert, the rest wait throttled. The
    // first four run until every insert and the count below are done, also on a loaded machine.
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        episodes.trigger('starts', 'keyed', { run: 'insert', customer: `c${i % 2}`, ms: 2_000 }),
      ),
    );
    const started = results.filter((r) => r.status === 'started');
    expect(started).toHaveLength(4);
    for (const result of started) {
      const episode = 'episode' in result ? result.episode : undefined;
      expect(episode?.status).toBe('running');
    }
    const ids = results.map((r) => ('episode' in r ? r.episode.id : ''));
    const { rows } = await db.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM cyclium_episodes
        WHERE id = ANY($1::uuid[]) GROUP BY status ORDER BY status`,
      [ids],
    );
    const byStatus = Object.fromEntries(rows.map((r) => [r.status, r.n]));
    expect((byStatus.running ?? 0) + (byStatus.done ?? 0)).toBeLessThanOrEqual(4);
    // The places each end frees go to the throttled rows without a poll.
    await allDone(db, ids);
    expect(await peak(db, 'insert', true)).toBe(2);
  });

  it("an episode's end on one node starts what another node throttled", async () => {
    // Running until B's three triggers have each been answered `queued`.
    const blocker = await a.get(Episodes).trigger('starts', 'one', { run: 'cross', ms: 3_000 });
    expect(blocker.status).toBe('started');
    const waiting = [];
    for (let i = 0; i < 3; i++) {
      const result = await b.get(Episodes).trigger('starts', 'one', { run: 'cross', ms: 100 });
      expect(result.status).toBe('queued');
      waiting.push('episode' in result ? result.episode.id : '');
    }
    const blockerId = 'episode' in blocker ? blocker.episode.id : '';
    await allDone(db, [blockerId, ...waiting], 20_000);
    expect(await peak(db, 'cross')).toBe(1);
    // The first of B's rows started within moments of the blocker's end, not at a poll.
    const { rows } = await db.query<{ gap: number }>(
      `SELECT extract(epoch FROM min(n.started_at) - b.ended_at)::float8 AS gap
         FROM flow_audit b, flow_audit n
        WHERE b.episode_id = $1 AND n.run = 'cross' AND n.episode_id <> $1
        GROUP BY b.ended_at`,
      [blockerId],
    );
    expect(rows[0]!.gap).toBeLessThan(2);
  });
});
