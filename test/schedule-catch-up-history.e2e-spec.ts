import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Expectation, type CycliumOptions, type EpisodeContext } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

let first: string | undefined;
let release: () => void = () => undefined;
const held = new Promise<void>((resolve) => (release = resolve));

/** Every second; the first bucket it sees stays running (a long or hung run) while later ones end at once. */
@Injectable()
@Actor({ id: 'ticker', maxConcurrentEpisodes: 5 })
class TickerActor {
  @Expectation({ id: 'tick', trigger: { every: '1s', catchUp: 'all' } })
  async tick(ep: EpisodeContext): Promise<void> {
    first ??= ep.trigger.scheduledAt;
    if (ep.trigger.scheduledAt === first) await ep.step('hold', () => held);
  }
}

/** Episodes archived a second after they end and deleted a second after that; no recovery to muddle the history. */
const CYCLIUM: CycliumOptions = {
  busUndispatchedMaxAgeMs: 1_000,
  triggerRequestTtlMs: 1_000,
  retention: { archiveAfter: 1_000, deleteAfter: 1_000, intervalMs: 200 },
  recovery: { onBoot: false, intervalMs: null },
  episodeShutdownMs: 200,
};

/**
 * A catch-up at boot reads the last bucket that ran from the episodes left. Retention deletes them
 * oldest ended first, so while an older bucket's episode stays (still running, or ended later), the
 * episodes of the buckets after it can be gone, and the catch-up would start them a second time.
 * Here one node ran buckets 1 (held running), 2 and 3 and stopped; another service's node in the
 * env deleted 2 and 3; a node that boots must not run them again. A trigger on cyclium_episodes
 * records every insert, so a second episode of a bucket shows even after retention took it.
 */
describe("a schedule's catch-up after retention deleted the buckets after an older one's episode", () => {
  const database = useDatabase();
  const apps = new Set<INestApplicationContext>();
  const start = async (providers: Array<typeof TickerActor>) => {
    const app = await startCycliumApp({ url: database.url, cyclium: CYCLIUM, providers });
    apps.add(app);
    return app;
  };
  const stop = async (app: INestApplicationContext) => {
    apps.delete(app);
    await app.close();
  };
  const scalar = async (sql: string, params: unknown[] = []) => {
    return Number((await database.db.query(sql, params)).rows[0].n);
  };
  const inserted = `SELECT count(*) AS n FROM audit_ticks WHERE op = 'INSERT'`;

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE audit_ticks (op text, bucket timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp());
      CREATE FUNCTION audit_tick() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE r cyclium_episodes;
      BEGIN
        r := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
        IF r.actor_id = 'ticker' THEN
          INSERT INTO audit_ticks (op, bucket) VALUES (TG_OP, (r.trigger_ref->>'scheduledAt')::timestamptz);
        END IF;
        RETURN NULL;
      END $$;
      CREATE TRIGGER audit_tick AFTER INSERT OR DELETE ON cyclium_episodes
        FOR EACH ROW EXECUTE FUNCTION audit_tick();`);
  });

  afterAll(async () => {
    release();
    await Promise.all([...apps].map(stop));
  });

  it('never runs a bucket whose episode retention deleted, and still runs the recent ones that fell', async () => {
    const ran = await start([TickerActor]);
    await waitFor('three buckets to run', async () => (await scalar(inserted)) >= 3, 10_000, 50);
    await stop(ran);
    // Another service of the env (its nodes do not host the schedule) deletes the ended ones; bucket 1 stays running.
    const other = await start([]);
    const deleted = `SELECT count(*) AS n FROM audit_ticks WHERE op = 'DELETE'`;
    await waitFor(
      'the ended buckets to be deleted',
      async () => (await scalar(deleted)) >= 2,
      15_000,
      100,
    );
    await stop(other);
    release();

    const bootedAt = new Date();
    await start([TickerActor]);
    // The live timer fires the buckets after the boot; a bucket before it runs only by the catch-up.
    const after = `SELECT count(DISTINCT bucket) AS n FROM audit_ticks WHERE op = 'INSERT' AND bucket > $1`;
    await waitFor(
      'two live buckets to run',
      async () => (await scalar(after, [bootedAt])) >= 2,
      10_000,
      50,
    );
    const twice = await database.db.query(
      `SELECT bucket, count(*)::int AS n FROM audit_ticks WHERE op = 'INSERT'
        GROUP BY bucket HAVING count(*) > 1`,
    );
    expect(twice.rows).toEqual([]);
    // The catch-up still made up the buckets that fell within its reach (archiveAfter + deleteAfter) before the boot.
    const caughtUp = `SELECT count(*) AS n FROM audit_ticks
                       WHERE op = 'INSERT' AND bucket <= $1 AND bucket > $1 - interval '2 seconds' AND at > $1`;
    expect(await scalar(caughtUp, [bootedAt])).toBeGreaterThan(0);
  });
});
