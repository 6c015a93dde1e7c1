import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { BusEvent } from './bus.interface.js';
import { EventAppender, type AppendOutcome, type EventLogScope, type StorableEvent } from './event-appender.js';
import { parseSnapshot, type DbSnapshot } from './db-snapshot.js';
import { isReservedType } from './reserved-types.js';

/** An event as a reader found it. */
export interface LoggedEvent {
  readonly event: BusEvent;
  readonly id: string;
  readonly txId: string;
  /** When it was stored, by the database clock (epoch milliseconds). */
  readonly committedAt: number;
  /** How long ago it was stored, by the database clock, when it was read. */
  readonly ageMs: number;
  /** False for a reserved event whose signature does not hold (the `integrity` option): nobody is handed it. */
  readonly trusted: boolean;
}

const COLUMNS = `e.id::text AS id, e.tx_id::text AS tx_id, e.event_id, e.type, e.payload, e.published_at, e.signature,
       (extract(epoch FROM e.created_at) * 1000)::float8 AS created_ms,
       (extract(epoch FROM statement_timestamp() - e.created_at) * 1000)::int AS age_ms`;

/**
 * The rows of `page` (ordered by tx_id, id) up to `maxBytes` of stored payload, the row that
 * crosses it included (so a read always makes progress), each with `taken`: how many rows the
 * page held. A page cut short by bytes is as full as one that hit its row limit, and the reader
 * reads on: a row in the shared table, however large, costs one read of its own, not the node's memory.
 */
function withinBytes(page: string, maxBytes: string): string {
  return `
      SELECT * FROM (
        SELECT c.*, count(*) OVER () AS taken,
               sum(coalesce(pg_column_size(c.payload), 0)) OVER (ORDER BY c.tx_id, c.id) - coalesce(pg_column_size(c.payload), 0) AS before_bytes
          FROM (${page}) c) w
       WHERE w.before_bytes < ${maxBytes}`;
}

/** Payload bytes (as stored) one read returns at most, past the row that crosses it. */
export const READ_MAX_BYTES = 4 * 1_048_576;

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
  SELECT s.snap::text AS snapshot, ${COLUMNS}, e.taken
    FROM (SELECT pg_current_snapshot() AS snap) s
    LEFT JOIN LATERAL (${withinBytes(
      `SELECT * FROM cyclium_events
        WHERE channel = $1 AND (tx_id >= $2::xid8 OR tx_id = ANY($3::xid8[]))
        ORDER BY tx_id, id
        LIMIT $4`,
      '$5',
    )}) e ON true
   ORDER BY e.tx_id, e.id`,
);

/** The rest of a read that filled its page: rows new since `from` and visible in `to`, after a key. */
const READ_PAGE = prepared(
  'events_read_page',
  `
  SELECT ${COLUMNS}, e.taken
    FROM (${withinBytes(
      `SELECT * FROM cyclium_events
        WHERE channel = $1 AND (tx_id >= $2::xid8 OR tx_id = ANY($3::xid8[]))
          AND pg_visible_in_snapshot(tx_id, $4::pg_snapshot)
          AND (tx_id, id) > ($5::xid8, $6::bigint)
        ORDER BY tx_id, id
        LIMIT $7`,
      '$8',
    )}) e
   ORDER BY e.tx_id, e.id`,
);

const SNAPSHOT = prepared('events_snapshot', `SELECT pg_current_snapshot()::text AS snapshot`);

/**
 * One batch of retention, by the database clock (rule 1): the next `limit` rows by id after `after`,
 * so a pass walks the table once with a key and a row it must keep is read once per pass, not by
 * every batch; a batch costs at most `limit` index entries however large the table. The
 * transaction-scoped advisory lock lets one node prune at a time, and the others skip rather than
 * wait. An event some consumer's position has not passed (see BusPositions) is kept until
 * `undispatchedMs`, then deleted all the same and counted, so a channel nobody consumes any more
 * cannot grow without end. `young`: the batch's last row is inside the window: ids follow insert
 * order, and a later insert is never much older, so the rest of the table is young too and the
 * pass is done. A young row among older ones (a clock step, an edited row) does not stop it.
 * A position holds only events of its consumer's type (a row without a type, written by a previous
 * release, holds every type).
 */
const PRUNE = prepared(
  'events_prune_after',
  `
  WITH lock AS (SELECT pg_try_advisory_xact_lock(7268853211580712513) AS held),
  examined AS (
    SELECT id, channel, tx_id, type, created_at,
           created_at < now() - make_interval(secs => $1::double precision / 1000) AS expired
      FROM cyclium_events WHERE (SELECT held FROM lock) AND id > $4::bigint ORDER BY id LIMIT $2),
  expired AS (
    SELECT o.id,
           EXISTS (SELECT 1 FROM cyclium_bus_positions p
                    WHERE p.channel = o.channel AND (p.type IS NULL OR p.type = o.type)
                      AND NOT pg_visible_in_snapshot(o.tx_id, p.position)) AS undispatched,
           o.created_at < now() - make_interval(secs => $3::double precision / 1000) AS overdue
      FROM examined o WHERE o.expired),
  doomed AS (SELECT id, undispatched FROM expired WHERE NOT undispatched OR overdue),
  deleted AS (DELETE FROM cyclium_events WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id)
  SELECT coalesce((SELECT held FROM lock), false) AS held,
         (SELECT count(*) FROM deleted)::int AS deleted,
         (SELECT count(*) FROM deleted JOIN doomed d USING (id) WHERE d.undispatched)::int AS undispatched,
         (SELECT count(*) FROM examined)::int AS examined,
         (SELECT max(id) FROM examined)::text AS last_id,
         coalesce((SELECT NOT expired FROM examined ORDER BY id DESC LIMIT 1), false) AS young`,
);

/** What one batch of retention did (EventLog.prune). */
export interface PruneBatch {
  /** False when another node was pruning: this one read nothing. */
  held: boolean;
  deleted: number;
  /** Of `deleted`, the events some consumer had not dispatched (older than `undispatchedMs`). */
  undispatched: number;
  /** Rows read; fewer than the limit means the end of the table. */
  examined: number;
  /** The highest id read: the next batch's `after`. */
  lastId: string | null;
  /** The last row read was inside the retention window. */
  young: boolean;
}

/** A read's rows, and whether more may follow them in the same snapshot (a limit cut it). */
export interface EventPage {
  events: LoggedEvent[];
  more: boolean;
}

/** The page held `limit` rows, or fewer came back than it held (bytes cut it). */
function isCut(rows: readonly EventRow[], limit: number): boolean {
  const taken = Number(rows[0]?.taken ?? 0);
  return taken >= limit || rows.length < taken;
}

interface EventRow {
  snapshot?: string;
  taken: string | null;
  signature: string | null;
  id: string | null;
  tx_id: string;
  created_ms: number;
  event_id: string;
  type: string;
  payload: unknown;
  published_at: Date;
  age_ms: number;
}

/** Every statement on cyclium_events: the reads and retention here, the appends through EventAppender. */
export class EventLog {
  private readonly appender: EventAppender;

  constructor(private readonly scope: EventLogScope) {
    this.appender = new EventAppender(scope);
  }

  get channel(): string {
    return this.scope.channel;
  }

  /** Stores `events` (ids already stored are compared, not written); one outcome per event, in order. */
  append(sql: SqlExecutor, events: readonly StorableEvent[]): Promise<AppendOutcome[]> {
    return this.appender.append(sql, events);
  }

  /** EventAppender.fragment: the append as the body of a CTE of a larger statement, writing only when `when` holds. */
  appendFragment(statement: Statement, events: readonly StorableEvent[], when: string): string {
    return this.appender.fragment(statement, events, when);
  }

  async snapshot(sql: SqlExecutor): Promise<DbSnapshot> {
    const { rows } = await sql.query<{ snapshot: string }>(SNAPSHOT([]));
    return parseSnapshot(rows[0]?.snapshot ?? '');
  }

  /** Rows new since `from`, and the snapshot they were read with; `more` when a limit (rows or bytes) cut the read. */
  async readAfter(sql: SqlExecutor, from: DbSnapshot, limit: number, maxBytes = READ_MAX_BYTES): Promise<EventPage & { snapshot: DbSnapshot }> {
    const { rows } = await sql.query<EventRow>(READ_AFTER([this.scope.channel, from.xmax, from.xip, limit, maxBytes]));
    const snapshot = parseSnapshot(rows[0]?.snapshot ?? '');
    const events = rows.filter((r) => r.id !== null);
    return { events: events.map((r) => this.toLogged(r)), more: isCut(events, limit), snapshot };
  }

  /** Rows new since `from` and visible in `to`, after `after` (from the start when absent); `more` as readAfter's. */
  async readPage(
    sql: SqlExecutor,
    from: DbSnapshot,
    to: DbSnapshot,
    after: LoggedEvent | undefined,
    limit: number,
    maxBytes = READ_MAX_BYTES,
  ): Promise<EventPage> {
    const { rows } = await sql.query<EventRow>(
      READ_PAGE([this.scope.channel, from.xmax, from.xip, to.text, after?.txId ?? '0', after?.id ?? '0', limit, maxBytes]),
    );
    return { events: rows.map((r) => this.toLogged(r)), more: isCut(rows, limit) };
  }

  private toLogged(row: EventRow): LoggedEvent {
    const event = { type: row.type, eventId: row.event_id, payload: row.payload, publishedAt: row.published_at.toISOString() };
    const { integrity, channel } = this.scope;
    const trusted = !integrity || !isReservedType(row.type) || integrity.verify(channel, event, row.signature);
    return { id: row.id as string, txId: row.tx_id, committedAt: row.created_ms, ageMs: row.age_ms, event, trusted };
  }

  /** One batch of retention after id `after` (see PRUNE); nothing when another node holds the lock. */
  async prune(sql: SqlExecutor, olderThanMs: number, undispatchedMs: number, limit: number, after = '0'): Promise<PruneBatch> {
    const { rows } = await sql.query<{ held: boolean; deleted: number; undispatched: number; examined: number; last_id: string | null; young: boolean }>(
      PRUNE([olderThanMs, limit, undispatchedMs, after]),
    );
    const row = rows[0];
    if (!row) return { held: false, deleted: 0, undispatched: 0, examined: 0, lastId: null, young: false };
    return { held: row.held, deleted: row.deleted, undispatched: row.undispatched, examined: row.examined, lastId: row.last_id, young: row.young };
  }
}
