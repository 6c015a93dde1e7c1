import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { BusEvent } from './bus.interface.js';
import { parseSnapshot, type DbSnapshot } from './db-snapshot.js';

/** An event ready to store: its payload already serialised (and checked) as JSON text. */
export interface StorableEvent {
  readonly event: BusEvent;
  readonly payloadJson: string;
}

/** An event as a reader found it. */
export interface LoggedEvent {
  readonly event: BusEvent;
  readonly id: string;
  readonly txId: string;
  /** When it was stored, by the database clock (epoch milliseconds). */
  readonly committedAt: number;
  /** How long ago it was stored, by the database clock, when it was read. */
  readonly ageMs: number;
}

/** Where the stamp of a row comes from: the stack, env and node that wrote it. */
export interface EventLogScope {
  readonly channel: string;
  readonly stackSlug: string | null;
  readonly env: string | null;
  readonly publisher: () => string;
}

/**
 * One statement for a whole batch, on the host pool (a publish) or on the client of the caller's
 * transaction (a lifecycle event committed with the state it announces). The ordinality keeps
 * the batch's order in the identity, which is the order readers deliver one transaction's rows in.
 * An id already stored on the channel stores nothing new, and the statement answers for each such
 * event whether the stored one is the same (type and payload, compared as jsonb so key order does
 * not matter): a retry is safe, a second meaning under one id is refused, and the batch still
 * costs one statement. `same` is NULL when the conflicting row is not in this statement's
 * snapshot (it committed while the insert waited on it, or this statement wrote it): COMPARE
 * looks again. Ids must be unique within one call (EventLog sends repeats to COMPARE).
 */
const APPEND = prepared(
  'events_append_checked',
  `
  WITH e AS MATERIALIZED (
    SELECT * FROM unnest($5::text[], $6::text[], $7::jsonb[], $8::timestamptz[]) WITH ORDINALITY AS e (event_id, type, payload, published_at, n)
  ), stored AS (
    INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher, source_stack, source_env)
    SELECT $1, e.event_id, e.type, e.payload, e.published_at, $2, $3, $4
      FROM e
     ORDER BY e.n
    ON CONFLICT (channel, event_id) DO NOTHING
    RETURNING event_id
  )
  SELECT e.n::int AS n,
         (SELECT o.type = e.type AND o.payload = e.payload
            FROM cyclium_events o
           WHERE o.channel = $1 AND o.event_id = e.event_id) AS same
    FROM e
   WHERE NOT EXISTS (SELECT 1 FROM stored s WHERE s.event_id = e.event_id)`,
);

/** Whether each event equals the one stored under its id, in a fresh snapshot; events whose row is gone are left out. */
const COMPARE = prepared(
  'events_compare',
  `
  SELECT e.n::int AS n, o.type = e.type AND o.payload = e.payload AS same
    FROM unnest($2::text[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS e (event_id, type, payload, n)
    JOIN cyclium_events o ON o.channel = $1 AND o.event_id = e.event_id`,
);

/** A row that vanished between the conflict and the look (retention) is inserted again; this many rounds at most. */
const APPEND_ROUNDS = 3;

/**
 * What happened to one event of an append: `stored` now, already stored as the `same` event (a
 * retry), or already stored with another type or payload (a `conflict`: nothing was written).
 */
export type AppendOutcome = 'stored' | 'same' | 'conflict';

const COLUMNS = `e.id::text AS id, e.tx_id::text AS tx_id, e.event_id, e.type, e.payload, e.published_at,
       (extract(epoch FROM e.created_at) * 1000)::float8 AS created_ms,
       (extract(epoch FROM statement_timestamp() - e.created_at) * 1000)::int AS age_ms`;

/**
 * Every row that became visible since the snapshot `from`, and the snapshot it was read with (the
 * next read's `from`). A row is new exactly when its transaction was still running at `from`
 * (listed in its xip) or had not started (at or past its xmax), so the reader neither skips a
 * transaction that commits late nor delivers a row twice, and a long transaction elsewhere costs
 * one index probe per read instead of stalling delivery (the method of Skytools PgQ's batches).
 * `pg_current_snapshot()` is the statement's own snapshot: the rows and the snapshot agree.
 */
const READ_AFTER = prepared(
  'events_read_after',
  `
  SELECT s.snap::text AS snapshot, ${COLUMNS}
    FROM (SELECT pg_current_snapshot() AS snap) s
    LEFT JOIN LATERAL (
      SELECT * FROM cyclium_events
       WHERE channel = $1 AND (tx_id >= $2::xid8 OR tx_id = ANY($3::xid8[]))
       ORDER BY tx_id, id
       LIMIT $4) e ON true
   ORDER BY e.tx_id, e.id`,
);

/** The rest of a read that filled its page: rows new since `from` and visible in `to`, after a key. */
const READ_PAGE = prepared(
  'events_read_page',
  `
  SELECT ${COLUMNS}
    FROM cyclium_events e
   WHERE e.channel = $1 AND (e.tx_id >= $2::xid8 OR e.tx_id = ANY($3::xid8[]))
     AND pg_visible_in_snapshot(e.tx_id, $4::pg_snapshot)
     AND (e.tx_id, e.id) > ($5::xid8, $6::bigint)
   ORDER BY e.tx_id, e.id
   LIMIT $7`,
);

const SNAPSHOT = prepared('events_snapshot', `SELECT pg_current_snapshot()::text AS snapshot`);

/**
 * Retention, by the database clock (rule 1). Only the oldest rows by id are examined, so a pass
 * costs at most `limit` index entries however large the table; the transaction-scoped advisory
 * lock lets one node prune at a time, and the others skip rather than wait. An event some
 * consumer's position has not passed (see BusPositions) is kept until `undispatchedMs`, then
 * deleted all the same and counted, so a channel nobody consumes any more cannot grow without end.
 */
const PRUNE = prepared(
  'events_prune_dispatched',
  `
  WITH lock AS (SELECT pg_try_advisory_xact_lock(7268853211580712513) AS held),
  expired AS (
    SELECT o.id,
           EXISTS (SELECT 1 FROM cyclium_bus_positions p
                    WHERE p.channel = o.channel AND NOT pg_visible_in_snapshot(o.tx_id, p.position)) AS undispatched,
           o.created_at < now() - make_interval(secs => $3::double precision / 1000) AS overdue
      FROM (SELECT id, channel, tx_id, created_at FROM cyclium_events
             WHERE (SELECT held FROM lock) ORDER BY id LIMIT $2) o
     WHERE o.created_at < now() - make_interval(secs => $1::double precision / 1000)),
  doomed AS (SELECT id, undispatched FROM expired WHERE NOT undispatched OR overdue),
  deleted AS (DELETE FROM cyclium_events WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id)
  SELECT count(*)::int AS deleted, (count(*) FILTER (WHERE d.undispatched))::int AS undispatched
    FROM deleted JOIN doomed d USING (id)`,
);

interface EventRow {
  snapshot?: string;
  id: string | null;
  tx_id: string;
  created_ms: number;
  event_id: string;
  type: string;
  payload: unknown;
  published_at: Date;
  age_ms: number;
}

/** Every statement on cyclium_events. */
export class EventLog {
  constructor(private readonly scope: EventLogScope) {}

  get channel(): string {
    return this.scope.channel;
  }

  /** Stores `events` (ids already stored are compared, not written); one outcome per event, in order. */
  async append(sql: SqlExecutor, events: readonly StorableEvent[]): Promise<AppendOutcome[]> {
    const outcomes: Array<AppendOutcome | undefined> = new Array<AppendOutcome | undefined>(events.length).fill(undefined);
    let open = events.map((_, i) => i);
    for (let round = 0; open.length > 0; round++) {
      if (round === APPEND_ROUNDS) throw new Error(`bus: could not settle event ${events[open[0] as number]?.event.eventId} (its stored row keeps vanishing)`);
      open = await this.appendRound(sql, events, open, outcomes);
    }
    return outcomes as AppendOutcome[];
  }

  /** One insert of the first event per id among `open`, then one look at the rest; returns what is still unsettled. */
  private async appendRound(
    sql: SqlExecutor,
    events: readonly StorableEvent[],
    open: readonly number[],
    outcomes: Array<AppendOutcome | undefined>,
  ): Promise<number[]> {
    const firsts: number[] = [];
    const toCompare: number[] = [];
    const seen = new Set<string>();
    for (const i of open) {
      const id = (events[i] as StorableEvent).event.eventId;
      if (seen.has(id)) {
        toCompare.push(i);
      } else {
        seen.add(id);
        firsts.push(i);
      }
    }
    const { channel, stackSlug, env, publisher } = this.scope;
    const batch = firsts.map((i) => events[i] as StorableEvent);
    const { rows } = await sql.query<{ n: number; same: boolean | null }>(APPEND([channel, publisher(), stackSlug, env, ...columns(batch)]));
    for (const i of firsts) outcomes[i] = 'stored';
    for (const row of rows) {
      const i = firsts[row.n - 1] as number;
      if (row.same === null) {
        outcomes[i] = undefined;
        toCompare.push(i);
      } else {
        outcomes[i] = row.same ? 'same' : 'conflict';
      }
    }
    if (toCompare.length === 0) return [];
    return this.compare(sql, events, toCompare, outcomes);
  }

  private async compare(
    sql: SqlExecutor,
    events: readonly StorableEvent[],
    indexes: readonly number[],
    outcomes: Array<AppendOutcome | undefined>,
  ): Promise<number[]> {
    const batch = indexes.map((i) => events[i] as StorableEvent);
    const { rows } = await sql.query<{ n: number; same: boolean }>(COMPARE([this.scope.channel, ...columns(batch).slice(0, 3)]));
    for (const row of rows) outcomes[indexes[row.n - 1] as number] = row.same ? 'same' : 'conflict';
    return indexes.filter((i) => outcomes[i] === undefined);
  }

  /**
   * APPEND as the body of a CTE of a larger statement, writing only when `when` holds (`e.n` is an
   * event's 1-based position). Without the conflict check: the library calls it only with ids it
   * has just minted, which no stored event can share.
   */
  appendFragment(statement: Statement, events: readonly StorableEvent[], when: string): string {
    const { channel, stackSlug, env, publisher } = this.scope;
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const [ids, types, payloads, times] = columns(events);
    return `
      INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher, source_stack, source_env)
      SELECT ${p(channel, 'text')}, e.event_id, e.type, e.payload, e.published_at, ${p(publisher(), 'text')}, ${p(stackSlug, 'text')}, ${p(env, 'text')}
        FROM unnest(${p(ids, 'text[]')}, ${p(types, 'text[]')}, ${p(payloads, 'jsonb[]')}, ${p(times, 'timestamptz[]')})
             WITH ORDINALITY AS e (event_id, type, payload, published_at, n)
       WHERE (${when})
       ORDER BY e.n
      ON CONFLICT (channel, event_id) DO NOTHING
      RETURNING 1`;
  }

  async snapshot(sql: SqlExecutor): Promise<DbSnapshot> {
    const { rows } = await sql.query<{ snapshot: string }>(SNAPSHOT([]));
    return parseSnapshot(rows[0]?.snapshot ?? '');
  }

  async readAfter(sql: SqlExecutor, from: DbSnapshot, limit: number): Promise<{ events: LoggedEvent[]; snapshot: DbSnapshot }> {
    const { rows } = await sql.query<EventRow>(READ_AFTER([this.scope.channel, from.xmax, from.xip, limit]));
    const snapshot = parseSnapshot(rows[0]?.snapshot ?? '');
    return { events: rows.filter((r) => r.id !== null).map(toLogged), snapshot };
  }

  /** Rows new since `from` and visible in `to`, after `after` (from the start when absent). */
  async readPage(sql: SqlExecutor, from: DbSnapshot, to: DbSnapshot, after: LoggedEvent | undefined, limit: number): Promise<LoggedEvent[]> {
    const { rows } = await sql.query<EventRow>(READ_PAGE([this.scope.channel, from.xmax, from.xip, to.text, after?.txId ?? '0', after?.id ?? '0', limit]));
    return rows.map(toLogged);
  }

  /**
   * Deletes up to `limit` events older than `olderThanMs` that every consumer's position has passed,
   * or older than `undispatchedMs` whatever the positions; nothing when another node holds the lock.
   */
  async prune(sql: SqlExecutor, olderThanMs: number, undispatchedMs: number, limit: number): Promise<{ deleted: number; undispatched: number }> {
    const { rows } = await sql.query<{ deleted: number; undispatched: number }>(PRUNE([olderThanMs, limit, undispatchedMs]));
    return rows[0] ?? { deleted: 0, undispatched: 0 };
  }
}

/** The batch as the unnest() arrays every append and compare statement takes: ids, types, payloads, publish times. */
function columns(batch: readonly StorableEvent[]): [string[], string[], string[], string[]] {
  return [batch.map((e) => e.event.eventId), batch.map((e) => e.event.type), batch.map((e) => e.payloadJson), batch.map((e) => e.event.publishedAt)];
}

function toLogged(row: EventRow): LoggedEvent {
  return {
    id: row.id as string,
    txId: row.tx_id,
    committedAt: row.created_ms,
    ageMs: row.age_ms,
    event: { type: row.type, eventId: row.event_id, payload: row.payload, publishedAt: row.published_at.toISOString() },
  };
}
