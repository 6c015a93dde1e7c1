import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import pg from 'pg';
import {
  Actor,
  CycliumModule,
  Episodes,
  Expectation,
  type ChildHandle,
  type Convergence,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { insertFloor, printTable } from '../support/measure.js';

/** Waits measured one at a time: each figure is a latency, not a rate. */
const SIGNALS = 60;
const FAN_OUT = [50, 200] as const;
const EVENTS = 2_000;
const WAITERS = 1_000;

@Injectable()
@Actor({ id: 'waits', maxConcurrentEpisodes: 64 })
class WaitsActor {
  @Expectation({ id: 'approve', trigger: 'manual' })
  async approve(ep: EpisodeContext): Promise<Convergence> {
    const signal = await ep.waitForSignal('go');
    return { result: signal.status };
  }

  @Expectation({ id: 'pay', trigger: 'manual' })
  async pay(ep: EpisodeContext<{ orderId: string }>): Promise<Convergence> {
    const paid = await ep.waitForEvent('bench.paid', {
      match: { orderId: ep.trigger.payload.orderId },
    });
    return { result: paid.status };
  }

  @Expectation({ id: 'parent', trigger: 'manual' })
  async parent(ep: EpisodeContext<{ n: number }>): Promise<Convergence> {
    const handles: ChildHandle[] = [];
    for (let i = 0; i < ep.trigger.payload.n; i++)
      handles.push(await ep.startChild('waits', 'child', { i }, { key: String(i) }));
    const done = await ep.waitForChildren(handles);
    return { result: done.children.length };
  }

  @Expectation({ id: 'child', trigger: 'manual' })
  async child(ep: EpisodeContext<{ i: number }>): Promise<Convergence> {
    return { result: await ep.step('work', () => ep.trigger.payload.i) };
  }
}

async function bootNode(url: string, nodeIdentity: string): Promise<INestApplicationContext> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 20 } }),
      CycliumModule.forRoot({ nodeIdentity, workClaims: 'postgres', jitterMs: 0 }),
    ],
    providers: [WaitsActor],
  })
  class WaitsBenchModule {}
  const app = await NestFactory.createApplicationContext(WaitsBenchModule, {
    logger: ['error', 'warn'],
  });
  await app.init();
  return app;
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? NaN;
};
const ms = (value: number) => Number(value.toFixed(1));

async function started(episodes: Episodes, expectation: string, payload: object) {
  const result = await episodes.trigger('waits', expectation, payload);
  if (!('episode' in result)) throw new Error(`not started: ${result.status}`);
  return result.episode.id;
}

async function waitingNow(db: pg.Pool, id: string): Promise<void> {
  for (let i = 0; i < 2_000; i++) {
    const { rows } = await db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]);
    if ((rows[0] as { status: string } | undefined)?.status === 'waiting') return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`episode ${id} never waited`);
}

/**
 * `npm run bench -- waits`: two nodes of one cluster. Signals: an episode on node A waits, node B
 * sends the signal and awaits `Episodes.result`; the lines are the signal's round trip (send →
 * result answered on B) and how long after the episode's end (its `finished_at`, database clock,
 * same machine) B's answer came. Fan-in: a parent on A starts n children (run by both nodes) and
 * waits for them: its time to done and the wake-ups it took. Events: the cost of storing an event
 * of a type with the match trigger off, and on with 0 and with 1,000 waits registered (per event,
 * against the bare-insert floor).
 */
export async function waitsBench(url: string): Promise<void> {
  const db = new pg.Pool({ connectionString: url, max: 4 });
  db.on('error', () => undefined);
  const a = await bootNode(url, 'waits-a');
  const b = await bootNode(url, 'waits-b');
  try {
    const onA = a.get(Episodes);
    const onB = b.get(Episodes);
    const roundTrips: number[] = [];
    const afterEnd: number[] = [];
    for (let i = 0; i < SIGNALS; i++) {
      const id = await started(onA, 'approve', {});
      await waitingNow(db, id);
      const sent = performance.now();
      const answer = onB.result(id, { timeoutMs: 30_000 });
      await onB.signal(id, 'go', { i });
      const outcome = await answer;
      const answeredAt = Date.now();
      roundTrips.push(performance.now() - sent);
      if (outcome?.status !== 'done') throw new Error(`episode ${id}: ${outcome?.status}`);
      const row = await onB.get(id);
      afterEnd.push(answeredAt - new Date(row?.finishedAt as Date).getTime());
    }
    const fanIn = [];
    for (const n of FAN_OUT) {
      const begun = performance.now();
      const id = await started(onA, 'parent', { n });
      const outcome = await onA.result(id, { timeoutMs: 120_000 });
      if (outcome?.result !== n) throw new Error(`parent ${id}: ${JSON.stringify(outcome)}`);
      const seconds = (performance.now() - begun) / 1000;
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclium_trigger_requests
          WHERE episode_id = $1 AND opts ->> 'wake' = 'wait' AND claimed_by IS NOT NULL`,
        [id],
      );
      fanIn.push({ children: n, seconds, wakes: rows[0]?.n ?? 0 });
    }
    const events = await eventCosts(url, db, onA);
    printTable(`waits: signal → Episodes.result on the other node (${SIGNALS} one at a time)`, [
      {
        'round trip p50 ms': ms(percentile(roundTrips, 50)),
        'round trip p95 ms': ms(percentile(roundTrips, 95)),
        'answer after the end p50 ms': ms(percentile(afterEnd, 50)),
        'p95 ms': ms(percentile(afterEnd, 95)),
        'max ms': ms(Math.max(...afterEnd)),
      },
    ]);
    printTable(
      'waits: fan-out and fan-in (children run by both nodes)',
      fanIn.map((f) => ({
        children: f.children,
        'parent done after s': Number(f.seconds.toFixed(2)),
        'children/s': Math.round(f.children / f.seconds),
        'parent wake-ups': f.wakes,
      })),
    );
    printTable(`waits: storing ${EVENTS} events of a type, one per statement`, events);
  } finally {
    await a.close();
    await b.close();
    await db.end();
  }
}

/** Per-event insert cost with no waits, then with WAITERS episodes waiting on the type. */
async function eventCosts(url: string, db: pg.Pool, episodes: Episodes) {
  const floor = await insertFloor(url, 1);
  const insertEvents = async (tag: string): Promise<number> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const began = performance.now();
      for (let i = 0; i < EVENTS; i++)
        await client.query(
          `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher)
           VALUES ('cyclium_bus', $1, 'bench.paid', $2, now(), 'bench')`,
          [`${tag}-${i}`, JSON.stringify({ orderId: `none-${tag}-${i}`, amount: i })],
        );
      return EVENTS / ((performance.now() - began) / 1000);
    } finally {
      await client.end();
    }
  };
  // The match trigger's own cost: the same inserts with it off (the bench runs as the owner).
  await db.query(`ALTER TABLE cyclium_events DISABLE TRIGGER cyclium_events_match_waits`);
  const bare = await insertEvents('bare').finally(() =>
    db.query(`ALTER TABLE cyclium_events ENABLE TRIGGER cyclium_events_match_waits`),
  );
  const without = await insertEvents('zero');
  for (let i = 0; i < WAITERS; i++) await started(episodes, 'pay', { orderId: `o-${i}` });
  for (;;) {
    const { rows } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclium_event_waits WHERE event_row IS NULL`,
    );
    if ((rows[0]?.n ?? 0) >= WAITERS) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const withWaits = await insertEvents('many');
  return [
    { waits: 'trigger off', 'events/s': Math.round(bare), 'vs insert floor': ms(bare / floor) },
    { waits: 0, 'events/s': Math.round(without), 'vs insert floor': ms(without / floor) },
    { waits: WAITERS, 'events/s': Math.round(withWaits), 'vs insert floor': ms(withWaits / floor) },
  ];
}
