import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Episodes,
  Expectation,
  Recovery,
  WorkClaims,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import { CapturingLogger, STACK_LINE, aboveDebug } from './support/capturing-logger.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { lapseClaim, stealClaim } from './support/episode-claims.js';
import { waitFor } from './support/wait-for.js';

/** Steps wait here until the test opens the gate or the run is stopped. */
const gates = new Map<string, () => void>();
const gate = (tag: string, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    gates.set(tag, resolve);
    signal.addEventListener('abort', () => resolve(), { once: true });
  });

@Injectable()
@Actor({ id: 'log-probe' })
class LogProbeActor {
  @Expectation({ id: 'crash', trigger: 'manual' })
  async crash(ep: EpisodeContext<{ tag: string }>): Promise<void> {
    await ep.step('before', () => 1);
    throw new TypeError(`host code broke for ${ep.trigger.payload.tag}`);
  }

  @Expectation({ id: 'ok', trigger: 'manual', recoveryPolicy: 'restart', maxAttempts: 3 })
  async ok(ep: EpisodeContext<{ tag: string; wait?: boolean }>): Promise<void> {
    await ep.step('work', async ({ signal }) => {
      if (ep.trigger.payload.wait) await gate(ep.trigger.payload.tag, signal);
      return 1;
    });
    await ep.step('after', () => 2);
  }
}

describe('logs an operator can read', () => {
  const database = useDatabase();
  const logger = new CapturingLogger();
  let app: INestApplicationContext;
  let closed = false;
  const longAgo = new Date(Date.now() - 10 * 60_000);

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      logger,
      cyclium: {
        nodeIdentity: 'node-logs',
        workClaims: 'postgres',
        workClaimsLeaseSeconds: 1.5,
        episodeShutdownMs: 500,
        bus: new LocalBus(),
        recovery: { onBoot: false, staleAfterMs: 5_000 },
      },
      providers: [LogProbeActor],
    });
  });

  afterAll(async () => {
    for (const open of gates.values()) open();
    if (!closed) await app?.close();
  });

  const row = async (id: string) =>
    (await database.db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
  const settled = (id: string) =>
    waitFor(
      `episode ${id} to end`,
      async () => !['running', 'queued'].includes((await row(id)).status),
    );

  it('logs a failed episode as one warning with its id, actor and error, its stack at debug only', async () => {
    const started = await app.get(Episodes).trigger('log-probe', 'crash', { tag: 'crash-1' });
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await settled(id);
    await waitFor('the warning', () => logger.about(id).some(aboveDebug));
    const warnings = logger.about(id).filter(aboveDebug);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn' });
    expect(warnings[0]?.text).toContain('log-probe.crash');
    expect(warnings[0]?.text).toContain('failed as crash: TypeError: host code broke for crash-1');
    expect(warnings[0]?.text).not.toMatch(STACK_LINE);
    expect(logger.lines.filter(aboveDebug).some((line) => STACK_LINE.test(line.text))).toBe(false);
    // The host's own bug: its stack is there for whoever turns debug on.
    expect(
      logger.about(id).filter((line) => line.level === 'debug' && STACK_LINE.test(line.text)),
    ).toHaveLength(1);
  });

  it('logs an episode start and end at debug only', async () => {
    const started = await app.get(Episodes).trigger('log-probe', 'ok', { tag: 'plain' });
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await settled(id);
    await waitFor('the end line', () =>
      logger.about(id).some((line) => line.text.includes('ended done')),
    );
    const lines = logger.about(id);
    expect(lines.every((line) => line.level === 'debug')).toBe(true);
    expect(lines.map((line) => line.text)).toEqual([
      expect.stringContaining('log-probe.ok) started'),
      expect.stringContaining('log-probe.ok) ended done'),
    ]);
  });

  it('logs a busy claim at debug, nothing above', async () => {
    await app.get(WorkClaims).acquire('held-elsewhere', 'node-alive');
    const before = logger.lines.length;
    expect(
      await app
        .get(Episodes)
        .trigger('log-probe', 'ok', { tag: 'busy' }, { dedupeKey: 'held-elsewhere' }),
    ).toEqual({ status: 'busy' });
    const during = logger.lines.slice(before);
    expect(during.filter(aboveDebug)).toEqual([]);
    expect(during.filter((line) => line.text.includes('held-elsewhere'))).toEqual([
      expect.objectContaining({
        level: 'debug',
        text: expect.stringContaining('its claim has a live holder'),
      }),
    ]);
  });

  it('logs a recovery as one info line with the episode, its last owner and the fence; a failed one as a warning', async () => {
    const orphan = await app.get(Episodes).create({
      actorId: 'log-probe',
      expectationId: 'ok',
      payload: { tag: 'orphan' },
      startedAt: longAgo,
      ownerNode: 'node-dead',
    });
    const hopeless = await app.get(Episodes).create({
      actorId: 'log-probe',
      expectationId: 'ok',
      payload: { tag: 'hopeless' },
      startedAt: longAgo,
      ownerNode: 'node-dead',
      maxAttempts: 0,
    });
    expect(await app.get(Recovery).sweep()).toMatchObject({ restarted: 1, failed: 1 });
    await settled(orphan.id);

    const restarted = logger.about(orphan.id).filter(aboveDebug);
    expect(restarted).toEqual([
      expect.objectContaining({ level: 'log', context: 'CycliumRecovery' }),
    ]);
    expect(restarted[0]?.text).toMatch(
      /took over episode \S+ \(log-probe\.ok\) from node-dead \(its journal went quiet\), fence \d+: restarting, attempt 1 of 3/,
    );
    const failed = logger.about(hopeless.id).filter(aboveDebug);
    expect(failed).toEqual([
      expect.objectContaining({
        level: 'warn',
        text: expect.stringContaining('failed as orphaned'),
      }),
    ]);
    expect(failed[0]?.text).toContain('(log-probe.ok)');
  });

  it('says a claim ran out with nobody taking it, rather than that another node owns it', async () => {
    const started = await app
      .get(Episodes)
      .trigger('log-probe', 'ok', { tag: 'lapsed', wait: true });
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('the step to wait', () => gates.has('lapsed'));
    // The lease runs out in the database while the holder still thinks it is alive; no node takes it.
    await lapseClaim(database.db, id);
    await waitFor('the abort line', () =>
      logger.about(id).some((line) => line.text.includes('aborted')),
    );
    const [aborted] = logger.about(id).filter(aboveDebug);
    if (!aborted) throw new Error('no abort line');
    expect(aborted.level).toBe('warn');
    expect(aborted.text).toContain('no node has taken it over yet');
    expect(aborted.text).not.toContain('another node');
  });

  it('names the node that took a lost claim over', async () => {
    const started = await app
      .get(Episodes)
      .trigger('log-probe', 'ok', { tag: 'stolen', wait: true });
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    const id = started.episode.id;
    await waitFor('the step to wait', () => gates.has('stolen'));
    // What a peer's takeover writes: the claim at the next fence, and the row under its name.
    await stealClaim(database.db, id, 'node-thief');
    await database.db.query(`UPDATE cyclium_episodes SET owner_node = 'node-thief' WHERE id = $1`, [
      id,
    ]);
    await waitFor('the abort line', () =>
      logger.about(id).some((line) => line.text.includes('aborted')),
    );
    expect(logger.about(id).filter(aboveDebug)).toEqual([
      expect.objectContaining({
        level: 'warn',
        text: expect.stringContaining('; node node-thief has taken it over (running)'),
      }),
    ]);
  });

  it('logs the drain on the draining node in one info line', async () => {
    const started = await app
      .get(Episodes)
      .trigger('log-probe', 'ok', { tag: 'drained', wait: true });
    if (started.status !== 'started') throw new Error(`not started: ${started.status}`);
    await waitFor('the step to wait', () => gates.has('drained'));
    closed = true;
    await app.close();
    const drain = logger.lines.filter((line) => line.text.startsWith('draining:'));
    expect(drain.filter(aboveDebug)).toEqual([
      expect.objectContaining({
        level: 'log',
        text: expect.stringContaining(
          'draining: 1 running episode(s) interrupted; peers restart them',
        ),
      }),
    ]);
    expect(
      drain.filter((line) => line.level === 'debug' && line.text.includes(started.episode.id)),
    ).toHaveLength(1);
  });
});
