import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { SharedRead } from '../primitives/shared-read.js';
import { sameEnv } from '../scope/scope-predicates.js';
import { isLimited, limitsOf, type FlowOptions } from './flow-limits.js';

/** An expectation as the registry holds it: the read keeps the limited ones. */
export interface FlowExpectation {
  actorId: string;
  id: string;
  options: FlowOptions;
}

/** One partition of a limited expectation: its episodes running and waiting `throttled`. */
export interface FlowKeyStatus {
  /** The partition (`flow_key`: the concurrency key; '' for none). */
  key: string;
  running: number;
  /** Throttled: waiting for the limits to let them start. */
  waiting: number;
  /** When the oldest of the waiting ones was queued; null when none waits. */
  oldestWaitingAt: Date | null;
}

/** One rate partition's window: the starts in the last `periodMs`, by the database clock. */
export interface FlowRateKeyStatus {
  /** The rate key ('' for none). */
  key: string;
  starts: number;
  /** When the oldest start leaves the window (a start frees then); null without starts. */
  freesAt: Date | null;
}

/** The keys beyond the ones listed, added up. */
export interface FlowOtherKeys {
  keys: number;
  running: number;
  waiting: number;
  oldestWaitingAt: Date | null;
}

/** The rate keys beyond the ones listed, added up. */
export interface FlowOtherRateKeys {
  keys: number;
  starts: number;
  freesAt: Date | null;
}

/** The rate window of a rate-limited expectation, per rate key. */
export interface FlowRateStatus {
  limit: number;
  periodMs: number;
  /** A `rateLimit.key` is declared: `limit` holds per key. */
  keyed: boolean;
  /** Starts in the window, all keys. */
  starts: number;
  /** Rate keys with a start in the window. */
  keyCount: number;
  /** The busiest keys (most starts first). */
  keys: FlowRateKeyStatus[];
  otherKeys: FlowOtherRateKeys | null;
}

/** The flow of one limited expectation in this node's env. */
export interface FlowExpectationStatus {
  actorId: string;
  expectationId: string;
  /** `concurrency` as declared (`limit` per key when `keyed`, `total` across keys); or null. */
  concurrency: { limit: number; total: number | null; keyed: boolean } | null;
  /** Running across all keys (every node of the env). */
  running: number;
  waiting: number;
  oldestWaitingAt: Date | null;
  /** Keys with a running or waiting episode. */
  keyCount: number;
  /** The busiest keys (most running and waiting first, then by key). */
  keys: FlowKeyStatus[];
  /** Every other key, added up; null when all are listed. */
  otherKeys: FlowOtherKeys | null;
  /** The rate window, for a `rateLimit`; null without one. */
  rate: FlowRateStatus | null;
}

/** What `FlowStatusReader.read` answers: the limited expectations this node hosts. */
export interface FlowStatus {
  /** The database clock when read. */
  at: Date;
  /** The env read (this node's): rows of other envs never count. */
  env: string | null;
  expectations: FlowExpectationStatus[];
}

/**
 * One label of an expectation, as the bucketed read counts it (see `FlowStatusReader.buckets`):
 * every label an expectation can have is listed, at 0 when nothing is in it.
 */
export interface FlowBucket {
  actorId: string;
  expectationId: string;
  /** '' for a partition without a key function, else `b0` to `b15` (a hash of the key). */
  bucket: string;
  /** Running and throttled in the bucket's partitions; null when no partition has this label. */
  running: number | null;
  waiting: number | null;
  /** Starts in the rate window (rate keys hashed alike); null when no rate key has this label. */
  rateWindowStarts: number | null;
}

/** How many buckets the keys of a keyed expectation are hashed into (labels b0 to b15). */
export const FLOW_BUCKETS = 16;
/** The keys listed per expectation unless asked otherwise; the rest are added up. */
export const FLOW_KEYS_SHOWN = 50;

/**
 * The flow of the given expectations in one statement: per key (or, with $3 NULL, per bucket) the
 * running and throttled episodes and the rate window's starts. Each expectation is read by a
 * lateral subquery on its own (actor_id, expectation_id) prefix of the partial indexes
 * cyclium_episodes_flow_running and cyclium_episodes_flow_throttled and of
 * cyclium_flow_starts_window, so the cost follows the expectation's live limited rows (running,
 * throttled, starts in the window), never the history. `$1` lists the expectations
 * (`a`, `e`; `k`, `r`: its concurrency and rate keys come from a key function; `p`: the rate
 * period or null), `$2` is the env, `$3` the keys listed.
 */
const FLOW_STATUS = (keyed: (flag: 'k' | 'r') => string) => `
  WITH t AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS t(a text, e text, k boolean, r boolean,
                                                      p float8)),
  load AS (
    SELECT t.a, t.e, t.k, l.key, sum(l.running)::int AS running, sum(l.waiting)::int AS waiting,
           min(l.oldest) AS oldest
      FROM t CROSS JOIN LATERAL (
        SELECT flow_key AS key, count(*) AS running, 0::bigint AS waiting,
               NULL::timestamptz AS oldest
          FROM cyclium_episodes
         WHERE status = 'running' AND flow_key IS NOT NULL AND actor_id = t.a
           AND expectation_id = t.e AND ${sameEnv('source_env', '$2::text')}
         GROUP BY flow_key
        UNION ALL
        SELECT flow_key, 0, count(*), min(queued_at)
          FROM cyclium_episodes
         WHERE status = 'throttled' AND flow_key IS NOT NULL AND actor_id = t.a
           AND expectation_id = t.e AND ${sameEnv('source_env', '$2::text')}
         GROUP BY flow_key) l
     GROUP BY 1, 2, 3, 4),
  starts AS (
    SELECT t.a, t.e, t.r, s.key, s.starts::int AS starts,
           s.oldest + make_interval(secs => t.p / 1000) AS frees_at
      FROM t CROSS JOIN LATERAL (
        SELECT rate_key AS key, count(*) AS starts, min(started_at) AS oldest
          FROM cyclium_flow_starts
         WHERE actor_id = t.a AND expectation_id = t.e AND ${sameEnv('source_env', '$2::text')}
           AND started_at > now() - make_interval(secs => t.p / 1000)
         GROUP BY rate_key) s
     WHERE t.p IS NOT NULL),
  load_ranked AS (
    SELECT *, row_number() OVER (PARTITION BY a, e ORDER BY running + waiting DESC, key) AS rn
      FROM load),
  starts_ranked AS (
    SELECT *, row_number() OVER (PARTITION BY a, e ORDER BY starts DESC, key) AS rn FROM starts)
  SELECT 'load' AS kind, a, e, ${keyed('k')} AS key, count(*)::int AS keys,
         sum(running)::int AS n, sum(waiting)::int AS waiting, min(oldest) AS at
    FROM load_ranked GROUP BY a, e, 4
  UNION ALL
  SELECT 'rate', a, e, ${keyed('r')}, count(*)::int, sum(starts)::int, 0, min(frees_at)
    FROM starts_ranked GROUP BY a, e, 4
  UNION ALL
  SELECT 'now', NULL, NULL, NULL, 0, 0, 0, now()`;

/** The busiest `$3` keys by name, every other one in the row whose key is NULL. */
const LISTED = FLOW_STATUS(() => `CASE WHEN rn <= $3::int THEN key END`);
/** Keys hashed into FLOW_BUCKETS labels, or '' as is for an expectation without a key function. */
const BUCKETED = FLOW_STATUS(
  (flag) => `CASE WHEN ${flag} THEN 'b' || (hashtext(key) & ${FLOW_BUCKETS - 1}) ELSE key END`,
);

interface Row {
  kind: 'load' | 'rate' | 'now';
  a: string | null;
  e: string | null;
  key: string | null;
  keys: number;
  n: number;
  waiting: number;
  at: Date | null;
}

/**
 * Reads how the limited expectations (`concurrency`, `rateLimit`) of this node's env stand: per
 * key, the episodes running against the limit and the ones waiting `throttled`, and the starts in
 * the rate window. For the operations API (the busiest keys listed, the rest added up) and the
 * metrics (keys hashed into a few buckets). Without a limited expectation it reads nothing; callers
 * within a second of each other share one read.
 */
@Injectable()
export class FlowStatusReader {
  private readonly listed = new SharedRead<string, FlowStatus>();
  private readonly bucketed = new SharedRead<string, FlowBucket[]>();

  constructor(
    private readonly database: CycliumDataSource,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** The limited ones among `expectations`, each with its `keysShown` busiest keys listed. */
  async read(
    expectations: Iterable<FlowExpectation>,
    keysShown = FLOW_KEYS_SHOWN,
    cacheMs = 1_000,
  ): Promise<FlowStatus> {
    const limited = [...expectations].filter((e) => isLimited(e.options));
    const env = this.options.env;
    if (limited.length === 0) return { at: new Date(), env, expectations: [] };
    const param = targetsOf(limited);
    return this.listed.get(`${keysShown}:${param}`, cacheMs, async () => {
      const rows = await this.query(LISTED, param, keysShown);
      return { at: nowOf(rows), env, expectations: limited.map((e) => statusOf(e, rows)) };
    });
  }

  /**
   * The limited ones among `expectations`, by bucket: a bounded label set (at most FLOW_BUCKETS
   * per expectation), whatever the number of keys.
   */
  async buckets(expectations: Iterable<FlowExpectation>, cacheMs = 1_000): Promise<FlowBucket[]> {
    const limited = [...expectations].filter((e) => isLimited(e.options));
    if (limited.length === 0) return [];
    const param = targetsOf(limited);
    return this.bucketed.get(param, cacheMs, async () => {
      const rows = await this.query(BUCKETED, param, null);
      const buckets = new Map<string, FlowBucket>();
      const bucketOf = (actorId: string, expectationId: string, bucket: string) => {
        const id = JSON.stringify([actorId, expectationId, bucket]);
        let found = buckets.get(id);
        if (!found) {
          const empty = { running: null, waiting: null, rateWindowStarts: null };
          found = { actorId, expectationId, bucket, ...empty };
          buckets.set(id, found);
        }
        return found;
      };
      const labels = (keyed: boolean) =>
        keyed ? Array.from({ length: FLOW_BUCKETS }, (_, i) => `b${i}`) : [''];
      for (const { actorId, id, options } of limited) {
        for (const label of labels(keyedFlow(options))) {
          const bucket = bucketOf(actorId, id, label);
          bucket.running = 0;
          bucket.waiting = 0;
        }
        if (options.rateLimit)
          for (const label of labels(options.rateLimit.key !== undefined))
            bucketOf(actorId, id, label).rateWindowStarts = 0;
      }
      for (const row of rows) {
        if (row.kind === 'now') continue;
        const bucket = bucketOf(row.a as string, row.e as string, row.key as string);
        if (row.kind === 'load') {
          bucket.running = (bucket.running ?? 0) + row.n;
          bucket.waiting = (bucket.waiting ?? 0) + row.waiting;
        } else bucket.rateWindowStarts = (bucket.rateWindowStarts ?? 0) + row.n;
      }
      return [...buckets.values()];
    });
  }

  private async query(sql: string, targets: string, keysShown: number | null): Promise<Row[]> {
    const values = [targets, this.options.env, ...(keysShown === null ? [] : [keysShown])];
    const { rows } = await this.database.sql.query<Row>(sql, values);
    return rows;
  }
}

function targetsOf(limited: FlowExpectation[]): string {
  return JSON.stringify(
    limited.map(({ actorId, id, options }) => ({
      a: actorId,
      e: id,
      k: keyedFlow(options),
      r: options.rateLimit?.key !== undefined,
      p: options.rateLimit?.periodMs ?? null,
    })),
  );
}

/** flow_key comes from a key function: the concurrency key, or the rate key without one. */
function keyedFlow(options: FlowOptions): boolean {
  return (options.concurrency ?? options.rateLimit)?.key !== undefined;
}

function nowOf(rows: Row[]): Date {
  return rows.find((row) => row.kind === 'now')?.at ?? new Date();
}

function statusOf(expectation: FlowExpectation, rows: Row[]): FlowExpectationStatus {
  const { actorId, id, options } = expectation;
  const limits = limitsOf(options);
  const mine = rows.filter((row) => row.a === actorId && row.e === id);
  const load = mine.filter((row) => row.kind === 'load');
  const starts = mine.filter((row) => row.kind === 'rate');
  const oldest = (list: Row[]) =>
    list.reduce<Date | null>((min, row) => (row.at && (!min || row.at < min) ? row.at : min), null);
  const sum = (list: Row[], pick: (row: Row) => number) =>
    list.reduce((total, row) => total + pick(row), 0);
  const othersLoad = load.find((row) => row.key === null);
  const othersRate = starts.find((row) => row.key === null);
  const byKey = (a: Row, b: Row) => (a.key as string).localeCompare(b.key as string);
  return {
    actorId,
    expectationId: id,
    concurrency: options.concurrency
      ? {
          limit: options.concurrency.limit,
          total: limits.total,
          keyed: options.concurrency.key !== undefined,
        }
      : null,
    running: sum(load, (row) => row.n),
    waiting: sum(load, (row) => row.waiting),
    oldestWaitingAt: oldest(load),
    keyCount: sum(load, (row) => row.keys),
    keys: load
      .filter((row) => row.key !== null)
      .sort((a, b) => b.n + b.waiting - (a.n + a.waiting) || byKey(a, b))
      .map((row) => ({
        key: row.key as string,
        running: row.n,
        waiting: row.waiting,
        oldestWaitingAt: row.at,
      })),
    otherKeys: othersLoad
      ? {
          keys: othersLoad.keys,
          running: othersLoad.n,
          waiting: othersLoad.waiting,
          oldestWaitingAt: othersLoad.at,
        }
      : null,
    rate: options.rateLimit
      ? {
          limit: options.rateLimit.limit,
          periodMs: options.rateLimit.periodMs,
          keyed: options.rateLimit.key !== undefined,
          starts: sum(starts, (row) => row.n),
          keyCount: sum(starts, (row) => row.keys),
          keys: starts
            .filter((row) => row.key !== null)
            .sort((a, b) => b.n - a.n || byKey(a, b))
            .map((row) => ({ key: row.key as string, starts: row.n, freesAt: row.at })),
          otherKeys: othersRate
            ? { keys: othersRate.keys, starts: othersRate.n, freesAt: othersRate.at }
            : null,
        }
      : null,
  };
}
