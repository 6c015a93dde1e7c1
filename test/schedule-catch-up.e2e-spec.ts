import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase, type TestDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import { FAST_RECOVERY, startNode } from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

const EVERY_MS = 2_000;
/** Buckets that fall inside the stop, at least. */
const MISSED = 3;

/** Each bucket of resource_advisor.summarize with its episode count, oldest first. */
async function buckets(database: TestDatabase): Promise<Array<{ at: number; n: number }>> {
  const { rows } = await database.db.query<{ at: string; n: number }>(
    `SELECT trigger_ref->>'scheduledAt' AS at, count(*)::int AS n FROM cyclium_episodes
      WHERE actor_id = 'resource_advisor' AND expectation_id = 'summarize' GROUP BY 1 ORDER BY 1`,
  );
  return rows.map((r) => ({ at: Date.parse(r.at), n: r.n }));
}

/** Whether `seen` (in order) holds every bucket from `from` on, up to its newest. */
function gapless(seen: Array<{ at: number }>, from: number): boolean {
  return seen.every((b, i) => b.at === from + i * EVERY_MS);
}

/** Boots a cluster whose advisor runs every 2 s, lets it run a bucket, kills it all, and waits out MISSED more buckets. */
function stoppedCluster(catchUp: 'all' | 'last') {
  const database = useDatabase();
  const nodes: DemoNode[] = [];
  const env = {
    ...FAST_RECOVERY,
    DEMO_ADVISOR_EVERY: `${EVERY_MS}ms`,
    DEMO_ADVISOR_CATCH_UP: catchUp,
  };
  const boot = async (id: string) => {
    const node = await startNode(database.url, id, env);
    nodes.push(node);
    return node;
  };
  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });
  /** The last bucket that ran before the stop. */
  const stop = async (): Promise<number> => {
    await Promise.all([boot(`${catchUp}-a`), boot(`${catchUp}-b`)]);
    await waitFor('a bucket to run', async () => (await buckets(database)).length > 0);
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    const last = Math.max(...(await buckets(database)).map((b) => b.at));
    await waitFor(
      `${MISSED} buckets to fall while no node runs`,
      async () =>
        (
          await database.db.query(`SELECT now() >= $1::timestamptz AS past`, [
            new Date(last + (MISSED + 0.5) * EVERY_MS),
          ])
        ).rows[0].past,
      (MISSED + 3) * EVERY_MS,
      100,
    );
    return last;
  };
  return { database, boot, stop };
}

/**
 * Schedule triggers after a whole-cluster stop, on real node processes (`kill -9` of every node):
 * with `catchUp: 'all'` each bucket that fell during the stop runs once when the cluster comes
 * back, with `catchUp: 'last'` only the latest; no bucket ever runs twice.
 */
describe("a schedule's catch-up after a whole-cluster stop", () => {
  describe("catchUp: 'all'", () => {
    const cluster = stoppedCluster('all');

    it('runs each missed bucket once, from two nodes booting together', async () => {
      const last = await cluster.stop();
      const back = await Promise.all([cluster.boot('all-c'), cluster.boot('all-d')]);
      // The catch-up fires the missed buckets one by one while the live timer fires the next ones,
      // so a live bucket may land before the last missed one: wait for every bucket from the stop on,
      // which a lost bucket never completes.
      const after = await waitFor(
        'the missed buckets and a live one to run, with no gap',
        async () => {
          const seen = (await buckets(cluster.database)).filter((b) => b.at > last);
          return seen.length >= MISSED + 1 && gapless(seen, last + EVERY_MS) ? seen : null;
        },
      ).then((seen) => seen as NonNullable<typeof seen>);
      // No gap from the last bucket before the stop to the newest, and none twice.
      expect(after.map((b) => (b.at - last) / EVERY_MS)).toEqual(after.map((_, i) => i + 1));
      expect(after.every((b) => b.n === 1)).toBe(true);
      expect(back.map((node) => node.output()).join('')).toMatch(
        /catch-up of resource_advisor\.summarize: \d+ bucket\(s\) fell since .* running each/,
      );
    });
  });

  describe("catchUp: 'last'", () => {
    const cluster = stoppedCluster('last');

    it('runs only the latest missed bucket, then the live ones', async () => {
      const last = await cluster.stop();
      const node = await cluster.boot('last-c');
      const line = (await waitFor('the catch-up line', () =>
        /(\d+) bucket\(s\) fell since \S+ while no node ran it; running the latest, (\S+)/.exec(
          node.output(),
        ),
      )) as RegExpExecArray;
      const missed = Number(line[1]);
      const latest = Date.parse(line[2] as string);
      expect(missed).toBeGreaterThanOrEqual(MISSED);
      expect(latest).toBe(last + missed * EVERY_MS);
      const after = await waitFor('the latest missed bucket and a live one to run', async () => {
        const seen = (await buckets(cluster.database)).filter((b) => b.at > last);
        return seen.length >= 2 && gapless(seen, latest) ? seen : null;
      }).then((seen) => seen as NonNullable<typeof seen>);
      // The buckets before the latest missed one never ran; from it on, each once.
      expect(after[0]?.at).toBe(latest);
      expect(after.map((b) => (b.at - latest) / EVERY_MS)).toEqual(after.map((_, i) => i));
      expect(after.every((b) => b.n === 1)).toBe(true);
    });
  });

  describe('a timer that fires late', () => {
    const database = useDatabase();
    const nodes: DemoNode[] = [];
    /** Buckets every 2 s whose episodes are archived a second after they end (their keys free from then on). */
    const env = {
      ...FAST_RECOVERY,
      DEMO_ADVISOR_EVERY: `${EVERY_MS}ms`,
      DEMO_ARCHIVE_AFTER_MS: '1000',
      DEMO_BUS_UNDISPATCHED_MS: '1000',
      DEMO_TRIGGER_TTL_MS: '1000',
      DEMO_RETENTION_EVERY_MS: '200',
    };
    afterAll(async () => {
      await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
    });

    it('never runs a bucket again once its episode is archived, from a node stalled past the bucket', async () => {
      const boot = async (id: string) => {
        const node = await startNode(database.url, id, env);
        nodes.push(node);
        return node;
      };
      const [, stalled] = (await Promise.all([boot('late-a'), boot('late-b')])) as [
        DemoNode,
        DemoNode,
      ];
      const doneAfter = async (at: number, archived = false) => {
        const { rows } = await database.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclium_episodes
            WHERE actor_id = 'resource_advisor' AND status = 'done' AND (trigger_ref->>'scheduledAt')::timestamptz > $1
              AND (NOT $2 OR archived_at IS NOT NULL)`,
          [new Date(at), archived],
        );
        return rows[0]?.n ?? 0;
      };
      await waitFor('a bucket to run', async () => (await doneAfter(0)) > 0, 15_000, 100);
      // The stalled node's timer waits for the next bucket when it stops (a paused VM, a blocked event loop).
      const frozenAt = Date.now();
      stalled.process.kill('SIGSTOP');
      try {
        const archived = async () => (await doneAfter(frozenAt, true)) > 0;
        await waitFor('the next bucket to run elsewhere and be archived', archived, 15_000, 100);
      } finally {
        stalled.process.kill('SIGCONT');
      }
      // Its timer fires the bucket it waited for as soon as it runs again, then the live ones.
      const resumedAt = Date.now();
      const resumed = async () => (await doneAfter(resumedAt)) >= 2;
      await waitFor('two buckets to run after it resumed', resumed, 15_000, 100);
      const twice = (await buckets(database)).filter((b) => b.n !== 1);
      expect(twice).toEqual([]);
    });
  });
});
