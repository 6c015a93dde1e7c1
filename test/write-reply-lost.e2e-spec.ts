import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { TcpProxy, type ChunkVerdict, type ProxyConnection } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';
import { readLifecycleEvents } from './support/lifecycle-readers.js';

/** How often each step's function ran, by `<episode id>:<step no>`. */
const runs = new Map<string, number>();
/** Called as each step's function runs (the blackout case starts its fault from there). */
let onStep: (stepNo: number) => void = () => undefined;

@Injectable()
@Actor({ id: 'lost_reply' })
class LostReplyActor {
  @Expectation({ id: 'work', trigger: 'manual', recoveryPolicy: 'restart' })
  async work(ep: EpisodeContext): Promise<{ summary: string }> {
    for (const name of ['s1', 's2', 's3']) {
      await ep.step(name, ({ stepNo }) => {
        const key = `${ep.episode.id}:${stepNo}`;
        runs.set(key, (runs.get(key) ?? 0) + 1);
        onStep(stepNo);
        return stepNo;
      });
    }
    return { summary: 'converged' };
  }
}

/** The prepared statements whose replies are lost: a lone fenced step write, and a lone end (claims joined). */
const STATEMENTS = {
  step: 'cyclium_episodes_step_write_fenced',
  end: 'cyclium_end_joined_',
} as const;
type Kind = keyof typeof STATEMENTS;

/** The last message of a reply: ReadyForQuery ('Z', length 5, status), sent after the implicit transaction committed. */
function endsWithReadyForQuery(chunk: Buffer): boolean {
  const at = chunk.length - 6;
  return at >= 0 && chunk[at] === 0x5a && chunk.readInt32BE(at + 1) === 5;
}

/**
 * Faults of the library's own connection under one node (claims on, a 2 s lease, a fast recovery),
 * through a proxy. A write reaches PostgreSQL and commits, and its reply never comes back (the
 * connection is cut just then, as a pooler reload or a network fault would): the library must
 * recognise its own committed write when it tries again, neither failing the episode as the host's
 * crash nor writing the step twice, nor taking its committed end for a lost claim. And when the
 * database stays out of reach for longer than the lease, the run gives the episode up to recovery
 * instead of recording a crash.
 */
describe("faults of the library's own writes", () => {
  const database = useDatabase();
  let proxy: TcpProxy;
  let app: INestApplicationContext;
  let armed: Kind | null = null;
  const dropped: Kind[] = [];
  const cutting = new Set<number>();
  const completed: string[] = [];
  const aborted: string[] = [];
  const unsubscribe: Array<() => void> = [];
  /** Every connection is cut as soon as it speaks: the database is out of reach. */
  let blackout = false;

  beforeAll(async () => {
    proxy = await TcpProxy.start({
      target: database.url,
      onClientData: (chunk: Buffer, connection: ProxyConnection): ChunkVerdict => {
        if (blackout) return 'drop-and-close';
        if (armed && chunk.includes(STATEMENTS[armed])) {
          dropped.push(armed);
          armed = null;
          cutting.add(connection.id);
        }
        return 'forward';
      },
      onServerData: (chunk: Buffer, connection: ProxyConnection): ChunkVerdict => {
        if (!cutting.has(connection.id)) return 'forward';
        if (!endsWithReadyForQuery(chunk)) return 'drop';
        cutting.delete(connection.id);
        return 'drop-and-close';
      },
    });
    unsubscribe.push(
      onCyclium('episode.completed', (event) => void completed.push(event.episodeId)),
    );
    unsubscribe.push(onCyclium('episode.aborted', (event) => void aborted.push(event.episodeId)));
    app = await startCycliumApp({
      url: proxy.url(database.url),
      cyclium: {
        nodeIdentity: 'lost-reply-node',
        workClaims: 'postgres',
        workClaimsLeaseSeconds: 2,
        recovery: { settleMs: 0, staleAfterMs: 500, intervalMs: 200 },
      },
      providers: [LostReplyActor],
    });
    // Something reads the terminal event, so each end writes it (once, whatever reply was lost).
    await readLifecycleEvents(app, ['episode.completed']);
  });

  afterAll(async () => {
    blackout = false;
    onStep = () => undefined;
    for (const off of unsubscribe) off();
    await app?.close();
    await proxy?.close();
  });

  async function runWithLostReply(kind: Kind): Promise<string> {
    armed = kind;
    const started = await app.get(Episodes).trigger('lost_reply', 'work', {});
    if (started.status !== 'started') throw new Error(`trigger was ${started.status}`);
    const id = started.episode.id;
    await waitFor(
      `episode ${id} to end`,
      async () => {
        const { rows } = await database.db.query(
          `SELECT status FROM cyclium_episodes WHERE id = $1`,
          [id],
        );
        return rows[0]?.status !== 'running';
      },
      10_000,
    );
    return id;
  }

  async function written(id: string) {
    const { rows } = await database.db.query<{
      status: string;
      error_class: string | null;
      steps: string[];
      terminal_events: number;
      claim: string;
    }>(
      `SELECT e.status, e.error_class,
              (SELECT array_agg(s.name ORDER BY s.step_no) FROM cyclium_episode_steps s WHERE s.episode_id = e.id) AS steps,
              (SELECT count(*)::int FROM cyclium_events v WHERE v.payload->>'episodeId' = e.id::text AND v.type = 'episode.completed') AS terminal_events,
              e.claim_state AS claim
         FROM cyclium_episodes e WHERE e.id = $1`,
      [id],
    );
    return rows[0];
  }

  it.each(['step', 'end'] as const)(
    'the reply to a %s write is lost after commit: the episode ends done, the write applied once',
    async (kind) => {
      const id = await runWithLostReply(kind);
      expect(dropped).toContain(kind);
      expect(await written(id)).toEqual({
        status: 'done',
        error_class: null,
        steps: ['s1', 's2', 's3'],
        terminal_events: 1,
        claim: 'done',
      });
      expect([1, 2, 3].map((n) => runs.get(`${id}:${n}`))).toEqual([1, 1, 1]);
      await waitFor('the completion to be told', () => completed.includes(id));
      expect(aborted).not.toContain(id);
    },
  );

  it('a step write that cannot be written before the lease runs out: left running for recovery, which restarts it to done', async () => {
    let first = true;
    onStep = (stepNo) => {
      if (stepNo !== 2 || !first) return;
      first = false;
      blackout = true;
    };
    const started = await app.get(Episodes).trigger('lost_reply', 'work', {});
    if (started.status !== 'started') throw new Error(`trigger was ${started.status}`);
    const id = started.episode.id;
    await waitFor('the run to give the episode up', () => aborted.includes(id), 10_000);
    const { rows } = await database.db.query(
      `SELECT status, error_class FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toEqual({ status: 'running', error_class: null });
    blackout = false;

    await waitFor(
      `episode ${id} to end`,
      async () => {
        const { rows: now } = await database.db.query(
          `SELECT status FROM cyclium_episodes WHERE id = $1`,
          [id],
        );
        return now[0]?.status !== 'running';
      },
      15_000,
    );
    const { rows: end } = await database.db.query(
      `SELECT e.status, e.error_class, (SELECT array_agg(s.name ORDER BY s.step_no) FROM cyclium_episode_steps s WHERE s.episode_id = e.id AND s.kind = 'step') AS steps
         FROM cyclium_episodes e WHERE e.id = $1`,
      [id],
    );
    expect(end[0]).toEqual({ status: 'done', error_class: null, steps: ['s1', 's2', 's3'] });
    // s1 was checkpointed before the blackout and is not run again; s2 never was, so the restart runs it again.
    expect([1, 2, 3].map((n) => runs.get(`${id}:${n}`))).toEqual([1, 2, 1]);
  });
});
