/**
 * An episode's terminal lifecycle event is written only when something reads it: a node of its
 * stack and env whose handlers declared the type, a node that declared nothing (an earlier
 * release), a durable consumer's stored position (its node up or not). And the
 * declaration is ordered against the ends: one that commits while an end is looking makes that end
 * wait for it and write.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import {
  Actor,
  Bus,
  Episodes,
  Expectation,
  Workflow,
  WorkflowStep,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { busChannel } from '../libs/cyclium/src/bus/bus-channel.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import {
  declaredReads,
  EndingWorker,
  episodeEnded,
  episodeEvents,
  foreignNode,
  runToEnd,
} from './support/lifecycle-readers.js';
import { waitFor } from './support/wait-for.js';

let release: ((fail: boolean) => void) | undefined;

/** Ends when the test says, failing or not. */
@Injectable()
@Actor({ id: 'reads_gate' })
class Gate {
  @Expectation({ id: 'gated', trigger: 'manual' })
  async gated(ep: EpisodeContext): Promise<{ summary: string }> {
    const fail = await new Promise<boolean>((resolve) => (release = resolve));
    await ep.step('one', () => 1);
    if (fail) throw new Error('gated failure');
    return { summary: 'ok' };
  }
}

/**
 * A workflow on node a: its engine hears its steps' ends, which are always written, so it does not
 * make a a reader of every episode's.
 */
@Injectable()
@Actor({ id: 'reads_stepper' })
class Stepper {
  @Expectation({ id: 'step', trigger: 'workflow' })
  async step(ep: EpisodeContext): Promise<{ summary: string }> {
    await ep.step('one', () => 1);
    return { summary: 'stepped' };
  }
}

@Injectable()
@Workflow({ id: 'reads_flow' })
class ReadsFlow {
  @WorkflowStep({ actor: 'reads_stepper', expectation: 'step' })
  only(): Record<string, never> {
    return {};
  }
}

/** A durable consumer of `episode.failed` (an event-triggered expectation keeps a position). */
@Injectable()
@Actor({ id: 'reads_watcher' })
class Watcher {
  @Expectation({ id: 'on_failed', trigger: { event: 'episode.failed' } })
  async onFailed(ep: EpisodeContext): Promise<{ summary: string }> {
    await ep.step('saw', () => 1);
    return { summary: 'saw' };
  }
}

const NODE = { workClaims: 'postgres' as const, recovery: { onBoot: false } };
const CHANNEL = busChannel(null, null);

describe('terminal lifecycle events are written only when something reads them', () => {
  const database = useDatabase(4);
  let a: INestApplicationContext;
  const apps: INestApplicationContext[] = [];

  const start = async (name: string, providers: unknown[]) => {
    const app = await startCycliumApp({
      url: database.url,
      cyclium: { ...NODE, nodeIdentity: name },
      providers: providers as never[],
    });
    apps.push(app);
    return app;
  };

  const close = async (app: INestApplicationContext) => {
    apps.splice(apps.indexOf(app), 1);
    await app.close();
  };

  const run = (expectation: 'ok' | 'boom') => runToEnd(a, database.db, expectation);
  const ended = (id: string) => episodeEnded(database.db, id);

  const events = (id: string) => episodeEvents(database.db, id);
  const declared = (node: string) => declaredReads(database.db, node);

  beforeAll(async () => {
    a = await start('reads-a', [EndingWorker, Gate, Stepper, ReadsFlow]);
  });

  afterAll(async () => {
    release?.(false);
    await Promise.all(apps.map((app) => app.close()));
  });

  it('writes none when no node of the scope reads it, and each node says what it reads', async () => {
    expect(await declared('reads-a')).toEqual([]);
    const done = await run('ok');
    const failed = await run('boom');
    expect(await events(done)).toEqual([]);
    expect(await events(failed)).toEqual([]);
  });

  it('writes the types a handler on another node declared, and that handler hears them', async () => {
    const b = await start('reads-b', []);
    const heard: string[] = [];
    b.get(Bus).subscribe<{ episodeId: string }>('episode.completed', (event) => {
      heard.push(event.payload.episodeId);
    });
    await waitFor("b's declaration", async () =>
      (await declared('reads-b'))?.includes('episode.completed'),
    );
    const done = await run('ok');
    const failed = await run('boom');
    expect(await events(done)).toEqual(['episode.completed']);
    expect(await events(failed)).toEqual([]);
    await waitFor('b to hear the end', () => heard.includes(done));

    // Episodes.result on b declares the failures too before it reads the row, so the end it
    // awaits writes its event and wakes it.
    const r = await a.get(Episodes).trigger('reads_gate', 'gated', {});
    const gated = (r as { episode: { id: string } }).episode.id;
    const outcome = b.get(Episodes).result(gated, { timeoutMs: 30_000 });
    await waitFor("b's declaration of failures", async () =>
      (await declared('reads-b'))?.includes('episode.failed'),
    );
    await waitFor('the gated episode to wait', () => release !== undefined);
    release?.(true);
    await expect(outcome).resolves.toMatchObject({ status: 'failed' });
    expect(await events(gated)).toEqual(['episode.failed']);
    await close(b);
  });

  it("writes for a durable consumer's stored position while its node is down", async () => {
    const c = await start('reads-c', [Watcher]);
    await waitFor("the watcher's position", async () => {
      const { rows } = await database.db.query(
        `SELECT 1 FROM cyclium_bus_positions WHERE channel = $1 AND type = 'episode.failed'`,
        [CHANNEL],
      );
      return rows.length > 0;
    });
    await close(c);
    expect(await declared('reads-c')).toBeNull();
    const failed = await run('boom');
    const done = await run('ok');
    expect(await events(failed)).toEqual(['episode.failed']);
    expect(await events(done)).toEqual([]);
  });

  it('writes every type while a node without a declaration of its boot is live', async () => {
    await foreignNode(database.db, 'reads-old-release', randomUUID());
    expect(await events(await run('ok'))).toEqual(['episode.completed']);
    // Gone (an hour without a word, past the readers' five minutes): no longer a reader.
    await database.db.query(
      `UPDATE cyclium_nodes SET last_seen_at = now() - interval '1 hour'
        WHERE node_identity = 'reads-old-release'`,
    );
    expect(await events(await run('ok'))).toEqual([]);
  });

  it('writes every type once another process took a declared identity over', async () => {
    const boot = randomUUID();
    await foreignNode(database.db, 'reads-taken-over', boot, []);
    expect(await events(await run('ok'))).toEqual([]);
    // The identity comes straight back in a new process (an earlier release's, or this one's before
    // it declared): its boot id is not the declaration's, so it reads everything.
    await database.db.query(
      `UPDATE cyclium_nodes SET boot_id = $1 WHERE node_identity = 'reads-taken-over'`,
      [randomUUID()],
    );
    expect(await events(await run('ok'))).toEqual(['episode.completed']);
    await database.db.query(`DELETE FROM cyclium_nodes WHERE node_identity = 'reads-taken-over'`);
  });

  it('makes an end that looks while a declaration is being stored wait for it, and write', async () => {
    const boot = randomUUID();
    await foreignNode(database.db, 'reads-declaring', boot, []);
    const declaring = new pg.Client({ connectionString: database.url });
    declaring.on('error', () => undefined);
    await declaring.connect();
    try {
      await declaring.query('BEGIN');
      const { rows } = await declaring.query<{ stored: boolean }>(
        `SELECT cyclium_declare_lifecycle_reads('reads-declaring', $1, '{episode.completed}')
           AS stored`,
        [boot],
      );
      expect(rows[0]?.stored).toBe(true);
      const r = await a.get(Episodes).trigger('reads_worker', 'ok', {});
      const id = (r as { episode: { id: string } }).episode.id;
      await waitFor('the end to wait for the declaration', async () => {
        // The shared hold the end asks for, queued behind the declaration's.
        const { rows: waiting } = await database.db.query(
          `SELECT 1 FROM pg_locks
            WHERE locktype = 'advisory' AND mode = 'ShareLock' AND NOT granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        );
        return waiting.length > 0;
      });
      await declaring.query('COMMIT');
      await ended(id);
      expect(await events(id)).toEqual(['episode.completed']);
    } finally {
      await declaring.query('ROLLBACK').catch(() => undefined);
      await declaring.end();
    }
  });
});
