import { Injectable, type INestApplicationContext } from '@nestjs/common';
import type pg from 'pg';
import { Actor, Bus, Episodes, Expectation, type EpisodeContext } from '@cyclium/nestjs';
import { LifecycleDeclarations } from '../../libs/cyclium/src/cluster/lifecycle-declarations.service.js';
import { waitFor } from './wait-for.js';

type Queryable = Pick<pg.Pool, 'query'>;

/**
 * Makes `app` a reader of the given terminal lifecycle events (a handler that ignores them) and
 * resolves once its node row says so: from then on every end in its stack and env writes them.
 * For tests that count those events; an end writes none that nobody reads.
 */
export async function readLifecycleEvents(
  app: INestApplicationContext,
  types: readonly string[] = ['episode.completed', 'episode.failed', 'episode.canceled'],
): Promise<() => void> {
  const offs = types.map((type) => app.get(Bus).subscribe(type, () => undefined));
  await app.get(LifecycleDeclarations).settled();
  return () => offs.forEach((off) => off());
}

/** The types of the events `db` holds about episode `id`, in the order they were written. */
export async function episodeEvents(db: Queryable, id: string): Promise<string[]> {
  const { rows } = await db.query<{ type: string }>(
    `SELECT type FROM cyclium_events WHERE payload->>'episodeId' = $1 ORDER BY id`,
    [id],
  );
  return rows.map((row) => row.type);
}

/** What `node`'s row declares for its current boot; null when it holds no such declaration. */
export async function declaredReads(db: Queryable, node: string): Promise<string[] | null> {
  const { rows } = await db.query<{ reads: string[] | null }>(
    `SELECT CASE WHEN lifecycle_boot = boot_id THEN lifecycle_reads END AS reads
       FROM cyclium_nodes WHERE node_identity = $1`,
    [node],
  );
  return rows[0]?.reads ?? null;
}

/**
 * A node row written by hand, as another process's, seen now in the default stack and env: with
 * `declared`, a declaration of its own boot (a node of this release); without, none (one of an
 * earlier release).
 */
export async function foreignNode(
  db: Queryable,
  node: string,
  boot: string,
  declared?: readonly string[],
): Promise<void> {
  await db.query(
    `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version,
                                started_at, last_seen_at, boot_id, lifecycle_boot, lifecycle_reads)
     VALUES ($1, NULL, NULL, 'full', 'elsewhere', 1, $4, now(), now(), $2,
             CASE WHEN $3::text[] IS NULL THEN NULL ELSE $2::uuid END, $3::text[])`,
    [node, boot, declared ?? null, declared === undefined ? '0.1.0' : '0.2.0'],
  );
}

/** One step, then done (`ok`) or failed (`boom`): ends of each terminal kind, for `runToEnd`. */
@Injectable()
@Actor({ id: 'reads_worker' })
export class EndingWorker {
  @Expectation({ id: 'ok', trigger: 'manual' })
  async ok(ep: EpisodeContext): Promise<{ summary: string }> {
    await ep.step('one', () => 1);
    return { summary: 'ok' };
  }

  @Expectation({ id: 'boom', trigger: 'manual' })
  async boom(ep: EpisodeContext): Promise<never> {
    await ep.step('one', () => 1);
    throw new Error('boom');
  }
}

/** Waits until episode `id` is done or failed. */
export async function episodeEnded(db: Queryable, id: string): Promise<void> {
  await waitFor(`episode ${id} to end`, async () => {
    const { rows } = await db.query(`SELECT status FROM cyclium_episodes WHERE id = $1`, [id]);
    return ['done', 'failed'].includes(rows[0]?.status as string);
  });
}

/** Triggers an EndingWorker expectation on `app` (which hosts it) and resolves with the id once it ended. */
export async function runToEnd(
  app: INestApplicationContext,
  db: Queryable,
  expectation: 'ok' | 'boom',
): Promise<string> {
  const r = await app.get(Episodes).trigger('reads_worker', expectation, {});
  const id = (r as { episode: { id: string } }).episode.id;
  await episodeEnded(db, id);
  return id;
}
