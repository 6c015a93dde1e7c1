import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Episodes, Expectation, onCyclium, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { TcpProxy, type ChunkVerdict, type ProxyConnection } from './support/tcp-proxy.js';
import { waitFor } from './support/wait-for.js';

/** How often each step's function ran, by `<episode id>:<step no>`. */
const runs = new Map<string, number>();

@Injectable()
@Actor({ id: 'lost_reply' })
class LostReplyActor {
  @Expectation({ id: 'work', trigger: 'manual', recoveryPolicy: 'restart' })
  async work(ep: EpisodeContext): Promise<{ summary: string }> {
    for (const name of ['s1', 's2', 's3']) {
      await ep.step(name, ({ stepNo }) => {
        const key = `${ep.episode.id}:${stepNo}`;
        runs.set(key, (runs.get(key) ?? 0) + 1);
        return stepNo;
      });
    }
    return { summary: 'converged' };
  }
}

/** The prepared statements whose replies are lost: a lone fenced step write, and a lone end (claims joined). */
const STATEMENTS = { step: 'cyclium_episodes_step_write_fenced', end: 'cyclium_end_joined_' } as const;
type Kind = keyof typeof STATEMENTS;

/** The last message of a reply: ReadyForQuery ('Z', length 5, status), sent after the implicit transaction committed. */
function endsWithReadyForQuery(chunk: Buffer): boolean {
  const at = chunk.length - 6;
  return at >= 0 && chunk[at] === 0x5a && chunk.readInt32BE(at + 1) === 5;
}

/**
 * A write reaches PostgreSQL and commits, and its reply never comes back (the connection is cut
 * just then, as a pooler reload or a network fault would): the library must recognise its own
 * committed write when it tries again, neither failing the episode as the host's crash nor
 * writing the step twice, nor taking its committed end for a lost claim.
 */
describe("a library write that committed but lost its reply", () => {
  const database = useDatabase();
  let proxy: TcpProxy;
  let app: INestApplicationContext;
  let armed: Kind | null = null;
  const dropped: Kind[] = [];
  const cutting = new Set<number>();
  const completed: string[] = [];
  const aborted: string[] = [];
  const unsubscribe: Array<() => void> = [];

  beforeAll(async () => {
    proxy = await TcpProxy.start({
      target: database.url,
      onClientData: (chunk: Buffer, connection: ProxyConnection): ChunkVerdict => {
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
    unsubscribe.push(onCyclium('episode.completed', (event) => void completed.push(event.episodeId)));
    unsubscribe.push(onCyclium('episode.aborted', (event) => void aborted.push(event.episodeId)));
    app = await startCycliumApp({
      url: proxy.url(database.url),
      cyclium: { nodeIdentity: 'lost-reply-node', workClaims: 'postgres', workClaimsLeaseSeconds: 30 },
      providers: [LostReplyActor],
    });
  });

  afterAll(async () => {
    for (const off of unsubscribe) off();
    await app?.close();
    await proxy?.close();
  });

  async function runWithLostReply(kind: Kind): Promise<string> {
    armed = kind;
    const started = await app.get(Episodes).trigger('lost_reply', 'work', {});
    if (started.status !== 'started') throw new Error(`trigger was ${started.status}`);
    const id = started.episode.id;
    await waitFor(`episode ${id} to end`, async () => {
      const { rows } = await database.db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]);
      return rows[0]?.status !== 'running';
    }, 10_000);
    return id;
  }

  async function written(id: string) {
    const { rows } = await database.db.query<{ status: string; error_class: string | null; steps: string[]; terminal_events: number; claim: string }>(
      `SELECT e.status, e.error_class,
              (SELECT array_agg(s.name ORDER BY s.step_no) FROM cyclium_episode_steps s WHERE s.episode_id = e.id) AS steps,
              (SELECT count(*)::int FROM cyclium_events v WHERE v.payload->>'episodeId' = e.id::text AND v.type = 'episode.completed') AS terminal_events,
              (SELECT c.state FROM cyclium_work_claims c WHERE c.dedupe_key = 'episode:' || e.id::text) AS claim
         FROM cyclium_episodes e WHERE e.id = $1`,
      [id],
    );
    return rows[0];
  }

  it.each(['step', 'end'] as const)('a %s write: the episode ends done, the write applied once', async (kind) => {
    const id = await runWithLostReply(kind);
    expect(dropped).toContain(kind);
    expect(await written(id)).toEqual({ status: 'done', error_class: null, steps: ['s1', 's2', 's3'], terminal_events: 1, claim: 'done' });
    expect([1, 2, 3].map((n) => runs.get(`${id}:${n}`))).toEqual([1, 1, 1]);
    await waitFor('the completion to be told', () => completed.includes(id));
    expect(aborted).not.toContain(id);
  });
});
