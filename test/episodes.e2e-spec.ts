import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, Logger, type INestApplicationContext } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import {
  Actor,
  Episodes,
  Expectation,
  Findings,
  OutputAdapter,
  TriggerRequests,
  WorkflowEngine,
  type BusEvent,
  type Convergence,
  type DeliveryContext,
  type DispatchResult,
  type EpisodeContext,
  type LifecyclePayload,
  type OutputDeliverer,
  WorkClaims,
} from '@cyclium/nestjs';
import { LocalBus, TERMINAL_EVENTS } from '@cyclium/nestjs/adapters';
import type { CycliumOutput } from '@cyclium/nestjs/entities';
import type pg from 'pg';
import { ActorRegistry } from '../libs/cyclium/src/actors/actor-registry.service.js';
import { ActorSlots } from '../libs/cyclium/src/dispatch/actor-slots.service.js';
import { TriggerSources } from '../libs/cyclium/src/triggers/trigger-sources.service.js';
import { EpisodeRunner } from '../libs/cyclium/src/episodes/episode-runner.service.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { freshDatabase, pool } from './support/database.js';
import { claimOf, stealClaim } from './support/episode-claims.js';
import { waitFor } from './support/wait-for.js';

/** A promise a test resolves by hand: lets a step wait until the test has done something mid-run. */
class Gate {
  readonly entered: Promise<void>;
  private enter!: () => void;
  private open!: () => void;
  private readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  constructor() {
    this.entered = new Promise((resolve) => (this.enter = resolve));
  }
  async pass(): Promise<void> {
    this.enter();
    await this.opened;
  }
  release(): void {
    this.open();
  }
}

const gates = new Map<string, Gate>();
const calls = new Map<string, number>();
const count = (name: string) => calls.set(name, (calls.get(name) ?? 0) + 1);
const delivered: Array<{ output: CycliumOutput; context: DeliveryContext }> = [];

interface ScriptPayload {
  tag: string;
  steps?: string[];
  gateAt?: string;
  /** Wait at this gate after the last step, before converging. */
  gateBeforeConverge?: boolean;
  crash?: boolean;
  outputKey?: string;
  finding?: string;
}

@Injectable()
@Actor({ id: 'monitor', maxConcurrentEpisodes: 20 })
class MonitorActor {
  @Expectation({
    id: 'check',
    trigger: { event: 'resource.updated', filter: { kind: { in: ['db', 'cache'] } } },
  })
  async check(ep: EpisodeContext<{ resource: string; usage: number }>): Promise<Convergence> {
    const usage = await ep.step('read_usage', () => ep.trigger.payload.usage);
    const key = `limit_breach:${ep.trigger.payload.resource}`;
    return {
      findings: [
        usage > 90
          ? { op: 'raise', key, class: 'limit_breach', severity: 'high', summary: `${usage}%` }
          : { op: 'clear', key },
      ],
    };
  }

  @Expectation({ id: 'tick', trigger: { every: '400ms' } })
  async tick(ep: EpisodeContext): Promise<Convergence> {
    await ep.step('tick', () => ep.trigger.scheduledAt);
    return { summary: 'ticked' };
  }

  @Expectation({
    id: 'debounced',
    trigger: { event: 'resource.burst' },
    subjectKey: 'resource',
    debounceMs: 150,
  })
  async debounced(ep: EpisodeContext<{ resource: string; n: number }>): Promise<Convergence> {
    return { summary: `${ep.trigger.payload.resource}:${ep.trigger.payload.n}` };
  }

  @Expectation({
    id: 'cooled',
    trigger: { event: 'resource.cooled' },
    subjectKey: 'resource',
    // Long enough to outlast the wait for the three runs on a loaded machine (200 ms did not).
    cooldownMs: 3_000,
  })
  async cooled(ep: EpisodeContext<{ resource: string; n: number }>): Promise<Convergence> {
    return { summary: `${ep.trigger.payload.resource}:${ep.trigger.payload.n}` };
  }

  /** Does what the payload says, so one expectation can walk every path. */
  @Expectation({ id: 'script', trigger: 'manual', budget: { maxSteps: 5 } })
  async script(ep: EpisodeContext<ScriptPayload>): Promise<Convergence> {
    const { tag, steps = ['a'], gateAt, crash, outputKey, finding } = ep.trigger.payload;
    const results: unknown[] = [];
    for (const name of steps) {
      results.push(
        await ep.step(name, async ({ idempotencyKey }) => {
          count(`${tag}:${name}`);
          if (name === gateAt) await gates.get(tag)?.pass();
          return `${name}@${idempotencyKey}`;
        }),
      );
    }
    if (ep.trigger.payload.gateBeforeConverge) await gates.get(tag)?.pass();
    if (crash) throw new Error(`boom in ${tag}`);
    return {
      summary: results.join(','),
      findings: finding ? [{ op: 'raise', key: finding, class: 'test' }] : [],
      outputs: outputKey ? [{ type: 'report', payload: { tag }, key: outputKey }] : [],
    };
  }

  @Expectation({ id: 'slow', trigger: 'manual', budget: { maxWallMs: 150 } })
  async slow(ep: EpisodeContext): Promise<void> {
    await ep.step('first', () => new Promise((r) => setTimeout(r, 250)));
    await ep.step('second', () => count('slow:second'));
  }
}

@Injectable()
@Actor({ id: 'narrow', maxConcurrentEpisodes: 1, overflow: 'queue' })
class NarrowActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ tag: string }>): Promise<Convergence> {
    await ep.step('only', async () => {
      count(`narrow:${ep.trigger.payload.tag}`);
      await gates.get(ep.trigger.payload.tag)?.pass();
    });
    return {};
  }
}

@Injectable()
@Actor({ id: 'shedding', maxConcurrentEpisodes: 1, overflow: 'shed_oldest', maxQueued: 1 })
class SheddingActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('only', () => gates.get(ep.trigger.payload.tag)?.pass());
  }
}

@Injectable()
@Actor({ id: 'dropping', maxConcurrentEpisodes: 1, overflow: 'drop' })
class DroppingActor {
  @Expectation({ id: 'work', trigger: 'manual' })
  async work(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('only', () => gates.get(ep.trigger.payload.tag)?.pass());
  }
}

@Injectable()
@OutputAdapter('report')
class ReportAdapter implements OutputDeliverer {
  async deliver(output: CycliumOutput, context: DeliveryContext): Promise<unknown> {
    delivered.push({ output, context });
    return { receipt: context.idempotencyKey };
  }
}

describe('episodes on two nodes sharing one database and one bus', () => {
  let url: string;
  let db: pg.Pool;
  let a: INestApplicationContext;
  let b: INestApplicationContext;
  const bus = new LocalBus();
  const lifecycle: Array<BusEvent<LifecyclePayload>> = [];

  beforeAll(async () => {
    url = await freshDatabase();
    db = pool(url, 3);
    bus.subscribe<LifecyclePayload>('*', (event) => {
      if (event.type.startsWith('episode.')) lifecycle.push(event);
    });
    const providers = [MonitorActor, NarrowActor, SheddingActor, DroppingActor, ReportAdapter];
    const node = (id: string) =>
      startCycliumApp({
        url,
        cyclium: { nodeIdentity: id, workClaims: 'postgres', workClaimsLeaseSeconds: 5, bus },
        providers,
        imports: [ScheduleModule.forRoot()],
      });
    [a, b] = await Promise.all([node('node-a'), node('node-b')]);
  });

  afterAll(async () => {
    for (const gate of gates.values()) gate.release();
    await Promise.all([a?.close(), b?.close()]);
    await db?.end();
  });

  const episodes = async (where: string, params: unknown[] = []) =>
    (await db.query(`SELECT * FROM cyclium_episodes WHERE ${where} ORDER BY inserted_at`, params))
      .rows;
  const settled = (id: string) =>
    waitFor(
      `episode ${id} to finish`,
      async () => (await episodes(`id = $1 AND status <> 'running'`, [id]))[0],
    );
  const terminalEvents = (id: string) =>
    lifecycle.filter(
      (e) => e.payload.episodeId === id && TERMINAL_EVENTS.includes(e.type as never),
    );

  it('the same bus event on both nodes makes exactly one episode', async () => {
    const published = [];
    for (let i = 0; i < 20; i++) {
      published.push(
        await bus.publish('resource.updated', {
          kind: 'db',
          resource: `db-${i}`,
          usage: i % 2 === 0 ? 95 : 10,
        }),
      );
    }
    await bus.publish('resource.updated', { kind: 'queue', resource: 'q-1', usage: 99 }); // filtered out
    await waitFor(
      '20 episodes done',
      async () => (await episodes(`expectation_id = 'check' AND status = 'done'`)).length === 20,
    );
    const rows = await episodes(`expectation_id = 'check'`);
    expect(rows).toHaveLength(20);
    // One winner per event, and it is one of the two nodes: each claim taken once, by the row's
    // owner (in the episode row, which mirrors a claim-table row when there is one).
    expect(rows.every((r) => r.owner_node === 'node-a' || r.owner_node === 'node-b')).toBe(true);
    const { rows: claims } = await db.query(
      `SELECT count(*)::int AS n FROM cyclium_episodes e
        WHERE e.expectation_id = 'check' AND e.claim_fence = 1 AND e.claim_owner = e.owner_node
          AND e.claim_state = 'done'`,
    );
    expect(claims[0].n).toBe(20);
    expect(rows.map((r) => r.trigger_ref.eventId).sort()).toEqual(
      published.map((e) => e.eventId).sort(),
    );
    const findings = await a.get(Findings).activeFor({ class: 'limit_breach' });
    expect(findings.map((f) => f.findingKey).sort()).toEqual(
      Array.from({ length: 10 }, (_, i) => `limit_breach:db-${i * 2}`).sort(),
    );
  });

  it('raising an active finding again refreshes it; clearing closes it (default env, one active per key)', async () => {
    const findings = a.get(Findings);
    const run = async (usage: number) => {
      const event = await bus.publish('resource.updated', {
        kind: 'cache',
        resource: 'cache-1',
        usage,
      });
      await waitFor(
        `the episode for usage ${usage}`,
        async () =>
          (await episodes(`trigger_ref->>'eventId' = $1 AND status = 'done'`, [event.eventId]))
            .length === 1,
      );
    };
    await run(95);
    await run(97);
    const active = await findings.activeFor({ key: 'limit_breach:cache-1' });
    expect(active).toHaveLength(1);
    expect(active[0]).toMatchObject({ summary: '97%', env: null, status: 'active' });
    await run(10);
    expect(await findings.activeFor({ key: 'limit_breach:cache-1' })).toEqual([]);
    const { rows } = await db.query(
      `SELECT status, cleared_by_episode_id FROM cyclium_findings WHERE finding_key = 'limit_breach:cache-1'`,
    );
    expect(rows).toEqual([{ status: 'cleared', cleared_by_episode_id: expect.any(String) }]);
  });

  it('the same schedule bucket on both nodes makes exactly one episode', async () => {
    await waitFor(
      'three buckets',
      async () => (await episodes(`expectation_id = 'tick' AND status = 'done'`)).length >= 3,
      10_000,
    );
    const { rows } = await db.query(
      `SELECT dedupe_key, count(*)::int AS n FROM cyclium_episodes WHERE expectation_id = 'tick' GROUP BY dedupe_key`,
    );
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(rows[0].dedupe_key).toMatch(
      /^schedule:monitor:tick:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/,
    );
  });

  it('debounces per subject on the trailing edge', async () => {
    for (let n = 1; n <= 5; n++) await bus.publish('resource.burst', { resource: 'r1', n });
    await bus.publish('resource.burst', { resource: 'r2', n: 1 });
    await waitFor(
      'two debounced episodes',
      async () => (await episodes(`expectation_id = 'debounced' AND status = 'done'`)).length === 2,
    );
    const summaries = (await episodes(`expectation_id = 'debounced'`)).map((r) => r.summary).sort();
    expect(summaries).toEqual(['r1:5', 'r2:1']);
  });

  it('cools a subject down after a run, and forgets it once the cooldown is over (memory stays bounded)', async () => {
    for (const resource of ['c1', 'c2', 'c3'])
      await bus.publish('resource.cooled', { resource, n: 1 });
    await waitFor(
      'three cooled episodes',
      async () => (await episodes(`expectation_id = 'cooled' AND status = 'done'`)).length === 3,
    );
    const cooling = () => a.get(TriggerSources).coolingDown + b.get(TriggerSources).coolingDown;
    expect(cooling()).toBeGreaterThanOrEqual(3);
    await bus.publish('resource.cooled', { resource: 'c1', n: 2 }); // inside the cooldown: ignored
    await waitFor('every cooldown to lapse and be forgotten', () => cooling() === 0, 10_000);
    await bus.publish('resource.cooled', { resource: 'c1', n: 3 });
    await waitFor(
      'c1 to run again',
      async () => (await episodes(`expectation_id = 'cooled' AND status = 'done'`)).length === 4,
    );
    expect((await episodes(`expectation_id = 'cooled'`)).map((r) => r.summary).sort()).toEqual([
      'c1:1',
      'c1:3',
      'c2:1',
      'c3:1',
    ]);
  });

  it('Episodes.create stamps started_at with the database clock, like every other timestamp', async () => {
    const created = await a
      .get(Episodes)
      .create({ actorId: 'monitor', expectationId: 'script', payload: { tag: 'clock' } });
    // now() of the inserting statement, which is also what inserted_at defaults to (to the microsecond).
    const { rows } = await db.query(
      `SELECT started_at = inserted_at AS same FROM cyclium_episodes WHERE id = $1`,
      [created.id],
    );
    expect(rows).toEqual([{ same: true }]);
    await db.query(`UPDATE cyclium_episodes SET status = 'canceled' WHERE id = $1`, [created.id]);
  });

  it('a stolen claim aborts the episode before its next step: no finding, output, status or later step', async () => {
    gates.set('stolen', new Gate());
    const started = await a.get(Episodes).trigger('monitor', 'script', {
      tag: 'stolen',
      steps: ['s1', 's2', 's3'],
      gateAt: 's2',
      outputKey: 'stolen-out',
      finding: 'stolen-finding',
    });
    expect(started.status).toBe('started');
    const id = (started as { episode: { id: string } }).episode.id;
    await gates.get('stolen')?.entered;
    await stealClaim(db, id);
    gates.get('stolen')?.release();
    await waitFor('the run to end on node-a', () =>
      a
        .get(EpisodeRunner)
        .inFlight()
        .every((r) => r.episode.id !== id),
    );

    const [row] = await episodes(`id = $1`, [id]);
    expect(row).toMatchObject({ status: 'running', finished_at: null, summary: null });
    expect(calls.get('stolen:s3')).toBeUndefined();
    expect((await a.get(Episodes).steps(id)).map((s) => s.name)).toEqual(['s1']);
    expect(
      (await db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'stolen-out'`)).rows,
    ).toEqual([]);
    expect(
      (await db.query(`SELECT * FROM cyclium_findings WHERE finding_key = 'stolen-finding'`)).rows,
    ).toEqual([]);
    expect(terminalEvents(id)).toEqual([]);
  });

  it('a holder whose claim was stolen after its last step converges nothing: no finding, output, status or event', async () => {
    gates.set('stale-converge', new Gate());
    const started = await a.get(Episodes).trigger('monitor', 'script', {
      tag: 'stale-converge',
      steps: ['s1'],
      gateBeforeConverge: true,
      outputKey: 'stale-out',
      finding: 'stale-finding',
    });
    const id = (started as { episode: { id: string } }).episode.id;
    await gates.get('stale-converge')?.entered;
    // Stolen in place, as a peer's takeover would: the holder has not noticed (its renewal has not run).
    await stealClaim(db, id);
    gates.get('stale-converge')?.release();
    await waitFor('the run to end on node-a', () =>
      a
        .get(EpisodeRunner)
        .inFlight()
        .every((r) => r.episode.id !== id),
    );

    expect((await episodes(`id = $1`, [id]))[0]).toMatchObject({
      status: 'running',
      finished_at: null,
      summary: null,
    });
    expect(
      (await db.query(`SELECT * FROM cyclium_outputs WHERE dedupe_key = 'stale-out'`)).rows,
    ).toEqual([]);
    expect(
      (await db.query(`SELECT * FROM cyclium_findings WHERE finding_key = 'stale-finding'`)).rows,
    ).toEqual([]);
    expect(await claimOf(db, id)).toMatchObject({ state: 'claimed', owner_node: 'thief' });
    expect(terminalEvents(id)).toEqual([]);
  });

  /** The method a resumed run is handed, as the actor's slots would hand it. */
  const script = () => a.get(ActorRegistry).expectation('monitor', 'script');

  it('resume returns checkpointed results without calling fn again', async () => {
    const episodesA = a.get(Episodes);
    const episode = await episodesA.create({
      actorId: 'monitor',
      expectationId: 'script',
      payload: { tag: 'resume', steps: ['a', 'b', 'c'] },
    });
    for (const [no, name] of [
      [1, 'a'],
      [2, 'b'],
    ] as const) {
      await db.query(
        `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state) VALUES ($1, $2, $3, $4)`,
        [episode.id, no, name, JSON.stringify({ v: `${name}-from-checkpoint` })],
      );
      await db.query(
        `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name) VALUES ($1, $2, 'step', $3)`,
        [episode.id, no, name],
      );
    }
    const grant = await a.get(WorkClaims).acquire(`episode:${episode.id}`);
    await a.get(EpisodeRunner).run(episode, script(), grant, { resumed: true });

    expect(calls.get('resume:a')).toBeUndefined();
    expect(calls.get('resume:b')).toBeUndefined();
    expect(calls.get('resume:c')).toBe(1);
    const [row] = await episodes(`id = $1`, [episode.id]);
    expect(row).toMatchObject({
      status: 'done',
      summary: `a-from-checkpoint,b-from-checkpoint,c@${episode.id}:3`,
    });
    expect((await episodesA.steps(episode.id)).map((s) => [s.stepNo, s.name])).toEqual([
      [1, 'a'],
      [2, 'b'],
      [3, 'c'],
    ]);
    expect(
      (
        await db.query(`SELECT * FROM cyclium_episode_checkpoints WHERE episode_id = $1`, [
          episode.id,
        ])
      ).rows,
    ).toEqual([]);
  });

  it('a resume whose code asks for a different step fails as nondeterministic_resume', async () => {
    const episode = await a.get(Episodes).create({
      actorId: 'monitor',
      expectationId: 'script',
      payload: { tag: 'drift', steps: ['x', 'y'] },
    });
    await db.query(
      `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state) VALUES ($1, 1, 'renamed', '{"v":1}')`,
      [episode.id],
    );
    await a
      .get(EpisodeRunner)
      .run(episode, script(), await a.get(WorkClaims).acquire(`episode:${episode.id}`), {
        resumed: true,
      });
    const [row] = await episodes(`id = $1`, [episode.id]);
    expect(row).toMatchObject({ status: 'failed', error_class: 'nondeterministic_resume' });
    expect(calls.get('drift:x')).toBeUndefined();
    expect(terminalEvents(episode.id).map((e) => e.type)).toEqual(['episode.failed']);
  });

  it('budgets stop the episode before the next step', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    const byStep = await a
      .get(Episodes)
      .trigger('monitor', 'script', { tag: 'budget', steps: ['1', '2', '3', '4', '5', '6'] });
    const byWall = await b.get(Episodes).trigger('monitor', 'slow', {});
    const steps = await settled((byStep as { episode: { id: string } }).episode.id);
    const wall = await settled((byWall as { episode: { id: string } }).episode.id);
    expect(steps).toMatchObject({ status: 'failed', error_class: 'budget_exceeded' });
    expect(calls.get('budget:5')).toBe(1);
    expect(calls.get('budget:6')).toBeUndefined();
    expect(wall).toMatchObject({ status: 'failed', error_class: 'budget_exceeded' });
    expect(calls.get('slow:second')).toBeUndefined();
    // A failure the library decided is said, with the episode's id.
    const warned = warn.mock.calls.map((c) => String(c[0]));
    warn.mockRestore();
    expect(warned).toContainEqual(
      expect.stringMatching(
        new RegExp(`episode ${wall.id} \\(monitor\\.slow\\) failed as budget_exceeded`),
      ),
    );
  });

  it('cancel from the other node takes effect before the next step', async () => {
    gates.set('cancel', new Gate());
    const started = await a
      .get(Episodes)
      .trigger('monitor', 'script', { tag: 'cancel', steps: ['c1', 'c2'], gateAt: 'c1' });
    const id = (started as { episode: { id: string } }).episode.id;
    await gates.get('cancel')?.entered;
    expect(await b.get(Episodes).cancel(id)).toBe('requested');
    await waitFor(
      'node-a to hear the cancel',
      () =>
        a
          .get(EpisodeRunner)
          .inFlight()
          .find((r) => r.episode.id === id)?.signal.aborted,
    );
    gates.get('cancel')?.release();
    expect(await settled(id)).toMatchObject({ status: 'canceled' });
    expect(calls.get('cancel:c2')).toBeUndefined();
    expect(await b.get(Episodes).cancel(id)).toBe('finished');
  });

  it('a crash fails the episode with the message and stack recorded', async () => {
    const started = await b
      .get(Episodes)
      .trigger('monitor', 'script', { tag: 'crash', steps: ['only'], crash: true });
    const row = await settled((started as { episode: { id: string } }).episode.id);
    expect(row).toMatchObject({ status: 'failed', error_class: 'crash' });
    expect(row.error_detail).toContain('boom in crash');
    expect(row.error_detail).toContain('script');
  });

  it('8 concurrent proposals of one output key make one row, delivered once', async () => {
    const before = delivered.length;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        (i % 2 ? a : b).get(Episodes).trigger('monitor', 'script', {
          tag: `out-${i}`,
          steps: ['o'],
          outputKey: 'weekly-report',
        }),
      ),
    );
    const ids = results.map((r) => (r as { episode: { id: string } }).episode.id);
    for (const id of ids) expect(await settled(id)).toMatchObject({ status: 'done' });
    const { rows } = await db.query(
      `SELECT * FROM cyclium_outputs WHERE dedupe_key = 'weekly-report'`,
    );
    expect(rows).toHaveLength(1);
    await waitFor(
      'the delivery to be recorded',
      async () =>
        (await db.query(`SELECT status FROM cyclium_outputs WHERE dedupe_key = 'weekly-report'`))
          .rows[0].status === 'delivered',
    );
    expect(delivered.length - before).toBe(1);
    expect(delivered[delivered.length - 1].context.idempotencyKey).toBe('weekly-report');
  });

  it('queues past maxConcurrentEpisodes and runs the queue in order', async () => {
    for (const tag of ['q1', 'q2', 'q3']) gates.set(tag, new Gate());
    const results = [];
    for (const tag of ['q1', 'q2', 'q3'])
      results.push(await a.get(Episodes).trigger('narrow', 'work', { tag }));
    expect(results.map((r) => r.status)).toEqual(['started', 'queued', 'queued']);
    const ids = results.map((r) => (r as { episode: { id: string } }).episode.id);
    expect((await episodes(`id = ANY($1)`, [ids])).map((r) => r.status).sort()).toEqual([
      'queued',
      'queued',
      'running',
    ]);
    for (const tag of ['q1', 'q2', 'q3']) {
      await gates.get(tag)?.entered;
      gates.get(tag)?.release();
    }
    for (const id of ids) expect(await settled(id)).toMatchObject({ status: 'done' });
    const started = (await episodes(`id = ANY($1)`, [ids])).map((r) => r.started_at.getTime());
    expect([...started].sort((x, y) => x - y)).toEqual(started);
  });

  it('shed_oldest cancels the oldest queued episode; drop publishes episode.dropped and writes no row', async () => {
    for (const tag of ['s1', 's2', 's3', 'd1']) gates.set(tag, new Gate());
    const first = await a.get(Episodes).trigger('shedding', 'work', { tag: 's1' });
    const second = await a.get(Episodes).trigger('shedding', 'work', { tag: 's2' });
    const third = await a.get(Episodes).trigger('shedding', 'work', { tag: 's3' });
    expect([first.status, second.status, third.status]).toEqual(['started', 'queued', 'queued']);
    const shed = (second as { episode: { id: string } }).episode.id;
    expect((await episodes(`id = $1`, [shed]))[0]).toMatchObject({ status: 'canceled' });
    expect(terminalEvents(shed).map((e) => e.type)).toEqual(['episode.canceled']);
    for (const tag of ['s1', 's3']) {
      await gates.get(tag)?.entered;
      gates.get(tag)?.release();
    }

    await a.get(Episodes).trigger('dropping', 'work', { tag: 'd1' });
    const dropped = await a.get(Episodes).trigger('dropping', 'work', { tag: 'd2' });
    expect(dropped).toEqual({ status: 'dropped' });
    await waitFor('episode.dropped on the bus', () =>
      lifecycle.some((e) => e.type === 'episode.dropped' && e.payload.actorId === 'dropping'),
    );
    gates.get('d1')?.release();
    expect((await episodes(`actor_id = 'dropping'`)).length).toBe(1);
  });

  it('every terminal path publishes exactly one terminal bus event', async () => {
    for (const tag of ['t-held', 't-queued', 't-shed-1', 't-shed-2', 't-shed-3'])
      gates.set(tag, new Gate());
    const id = (result: DispatchResult) =>
      (result as Extract<DispatchResult, { episode: unknown }>).episode.id;
    const trigger = (actor: string, expectation: string, payload: unknown) =>
      a.get(Episodes).trigger(actor, expectation, payload);
    const done = id(await trigger('monitor', 'script', { tag: 't-done', steps: ['x'] }));
    const crashed = id(
      await trigger('monitor', 'script', { tag: 't-crash', steps: ['x'], crash: true }),
    );
    const overBudget = id(
      await trigger('monitor', 'script', {
        tag: 't-budget',
        steps: ['1', '2', '3', '4', '5', '6'],
      }),
    );
    // A running one canceled, a queued one canceled, one shed by a newer arrival.
    const held = id(
      await trigger('monitor', 'script', { tag: 't-held', steps: ['h1', 'h2'], gateAt: 'h1' }),
    );
    await gates.get('t-held')?.entered;
    expect(await b.get(Episodes).cancel(held)).toBe('requested');
    gates.get('t-held')?.release();
    const narrowRunning = id(await trigger('narrow', 'work', { tag: 't-queued' }));
    const queued = id(await trigger('narrow', 'work', { tag: 't-never' }));
    expect(await b.get(Episodes).cancel(queued)).toBe('canceled');
    await gates.get('t-queued')?.entered;
    gates.get('t-queued')?.release();
    const shedRunning = id(await trigger('shedding', 'work', { tag: 't-shed-1' }));
    const shed = id(await trigger('shedding', 'work', { tag: 't-shed-2' }));
    const survivor = id(await trigger('shedding', 'work', { tag: 't-shed-3' }));
    for (const tag of ['t-shed-1', 't-shed-3']) {
      await gates.get(tag)?.entered;
      gates.get(tag)?.release();
    }
    const all = [
      done,
      crashed,
      overBudget,
      held,
      narrowRunning,
      queued,
      shedRunning,
      shed,
      survivor,
    ];
    const expected: Record<string, string> = {
      done: 'episode.completed',
      failed: 'episode.failed',
      canceled: 'episode.canceled',
    };
    for (const episodeId of all) {
      const row = await settled(episodeId);
      await waitFor(
        `the terminal event of ${episodeId}`,
        () => terminalEvents(episodeId).length >= 1,
      );
      expect({ id: episodeId, events: terminalEvents(episodeId).map((e) => e.type) }).toEqual({
        id: episodeId,
        events: [expected[row.status]],
      });
    }
    expect((await episodes(`id = ANY($1)`, [all])).map((r) => r.status).sort()).toEqual([
      'canceled',
      'canceled',
      'canceled',
      'done',
      'done',
      'done',
      'done',
      'failed',
      'failed',
    ]);
  });

  it('answers a lookup by an id that cannot be one as not found, not as a database error', async () => {
    for (const id of ['none', '42', "x' OR '1'='1"]) {
      await expect(a.get(Episodes).get(id)).resolves.toBeNull();
      await expect(a.get(Episodes).steps(id)).resolves.toEqual([]);
      await expect(a.get(Episodes).cancel(id)).resolves.toBe('not_found');
      await expect(a.get(WorkflowEngine).get(id)).resolves.toBeNull();
      await expect(a.get(WorkflowEngine).cancel(id)).resolves.toBe('not_found');
      await expect(a.get(TriggerRequests).get(id)).resolves.toBeNull();
      await expect(a.get(TriggerRequests).forEpisode(id)).resolves.toEqual([]);
    }
  });

  it('starts nothing new once the node has begun draining', async () => {
    const c = await startCycliumApp({
      url,
      cyclium: { nodeIdentity: 'node-c', workClaims: 'postgres', workClaimsLeaseSeconds: 5, bus },
      providers: [MonitorActor, NarrowActor, SheddingActor, DroppingActor, ReportAdapter],
    });
    try {
      c.get(ActorSlots).stopAccepting();
      expect(await c.get(Episodes).trigger('monitor', 'script', { tag: 'late' })).toEqual({
        status: 'busy',
      });
      expect(await episodes(`trigger_ref->'payload'->>'tag' = 'late'`)).toEqual([]);
    } finally {
      await c.close();
    }
  });
});
