import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { BusEvent } from './bus.interface.js';
import {
  EventAppender,
  type AppendOutcome,
  type EventLogScope,
  type StorableEvent,
} from './event-appender.js';
import { parseSnapshot, type DbSnapshot } from './db-snapshot.js';
import { isReservedType } from './reserved-types.js';
import { READ_MAX_BYTES } from './event-bounds.js';
import { asTraceContext } from '../primitives/trace-context.js';

/** An event as a reader found it. */
export interface LoggedEvent {
  readonly event: BusEvent;
  readonly id: string;
  readonly txId: string;
  /** When it was stored, by the database clock (epoch milliseconds). */
  readonly committedAt: number;
  /** How long ago it was stored, by the database clock, when it was read. */
  readonly ageMs: number;
  /**
   * False for a reserved event whose signature does not hold (the `integrity` option): nobody is
   * handed it.
   */
  readonly trusted: boolean;
  /**
   * The bytes of its payload as text when they are over what one read loads (READ_MAX_BYTES): the
   * payload was left in the database (`event.payload` is null) and nobody is handed the event.
   * Null for every event a writer of this library stored (see assertStoredSize).
   */
  readonly oversizedBytes: number | null;
}

/**
 * When a row was stored, as its reader may take it: never after the read (a row this statement sees
 * committed before it; a later `created_at`, up to `infinity`, is a stepped clock or a hostile
 * row) and never before the epoch (`-infinity`), so its time and age are finite, never negative,
 * and 64-bit (float8 milliseconds: a 32-bit age overflowed past 24.8 days and failed every read).
 */
const STORED_AT = `greatest(least(e.created_at, statement_timestamp()), timestamptz 'epoch')`;

const COLUMNS = `e.id::text AS id, e.tx_id::text AS tx_id, e.event_id, e.type, e.payload,
e.published_at, e.signature, e.trace_context,
       (extract(epoch FROM ${STORED_AT}) * 1000)::float8 AS created_ms,
       (extract(epoch FROM statement_timestamp() - ${STORED_AT}) * 1000)::float8 AS age_ms`;

/**
 * The rows of `page` (ordered by tx_id, id) whose payloads as text (`payload_bytes`: what the node
 * loads, not the stored size, which a very compressible payload keeps tiny) add up to at most
 * `maxBytes`, each with `taken`: how many rows the page held. A row whose payload alone is over
 * `maxBytes` comes back without it and counts as nothing, so a read always makes progress and no
 * node loads it. The stored sizes narrow the page first, as cheaply as before: only the rows a
 * read by stored bytes would have returned are measured as text. A page cut short by bytes is as
 * full as one that hit its row limit, and the reader reads on.
 */
function withinBytes(page: string, maxBytes: string): string {
  const max = `${maxBytes}::bigint`;
  return `
      SELECT m.id, m.tx_id, m.event_id, m.type, m.published_at, m.signature, m.trace_context,
             m.created_at, m.taken,
             m.payload_bytes,
             CASE WHEN m.payload_bytes > ${max} THEN NULL ELSE m.payload END AS payload
        FROM (
          SELECT t.*, sum(CASE WHEN t.payload_bytes > ${max} THEN 0 ELSE t.payload_bytes END)
                        OVER (ORDER BY t.tx_id, t.id) AS through_bytes
            FROM (
              SELECT s.*, coalesce(octet_length(s.payload::text), 0)::bigint AS payload_bytes
                FROM (
                  SELECT c.*, count(*) OVER () AS taken,
                         sum(coalesce(pg_column_size(c.payload), 0)) OVER (ORDER BY c.tx_id, c.id)
                           - coalesce(pg_column_size(c.payload), 0) AS stored_before
                    FROM (${page}) c) s
               WHERE s.stored_before < ${max}) t) m
       WHERE m.through_bytes <= ${max}`;
}

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
  SELECT s.snap::text AS snapshot, ${COLUMNS}, e.taken, e.payload_bytes::text
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

/**
 * The rest of a read that filled its page: rows new since `from` and visible in `to`, after a key.
 */
const READ_PAGE = prepared(
  'events_read_page',
  `
  SELECT ${COLUMNS}, e.taken, e.payload_bytes::text
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
 * Retention's advisory lock: this class (the old cluster-wide key's upper half) and the channel's
 * hash.
 */
const PRUNE_LOCK_CLASS = 1_692_411_771;

/**
 * One batch of retention on one channel, by the database clock (rule 1): the channel's next `limit`
 * rows in the order readers take them, (tx_id, id), after `after`, through the readers' index, so a
 * pass walks the channel once with a key and a row it must keep is read once per pass, not by every
 * batch; a batch costs at most `limit` index entries however large the table. Only the channel's
 * rows: the nodes of its stack and env (`busChannel`) are the only ones that read them, so only
 * their windows and positions say when a row is done with. A node of another stack or env never
 * deletes them, and a stack's node leaves the rows without a stack (its env's channel of none) to
 * the nodes without one, which read them. The transaction-scoped advisory lock on the channel lets
 * one node of it prune at a time, and the others skip rather than wait. An event some consumer's
 * position has not passed (see BusPositions) is kept until `undispatchedMs`, then deleted all the
 * same and counted, so a channel nobody consumes any more cannot grow without end. `young`: the
 * batch's last row is inside the window: rows follow the order their transactions wrote in, and a
 * later one is never much older, so the rest of the channel is young too and the pass is done. A
 * young row among older ones (a clock step, an edited row) does not stop it, nor does a last row
 * dated in the future, which says nothing of the rows after it. The walk is a range over the
 * index's whole key, the channel's rows kept after the limit, not `channel = $1` and a range: with
 * statistics taken while the table was small, the planner reads that equality as a handful of rows
 * and sorts the whole channel off a bitmap for every batch. A batch that runs past the channel's
 * end reads at most `limit` rows of the next one, and stops.
 * A position holds only events of its consumer's type (a row without a type, written by a previous
 * release, holds every type).
 */
const PRUNE = prepared(
  'events_prune_channel',
  `
  WITH lock AS (SELECT pg_try_advisory_xact_lock(${PRUNE_LOCK_CLASS}, hashtext($1::text)) AS held),
  examined AS (
    SELECT id, tx_id, type, created_at,
           created_at < now() - make_interval(secs => $2::double precision / 1000) AS expired
      FROM (SELECT id, channel, tx_id, type, created_at FROM cyclium_events
             WHERE (SELECT held FROM lock)
               AND (channel, tx_id, id) > ($1::text, $5::xid8, $6::bigint)
             ORDER BY channel, tx_id, id
             LIMIT $3) walked
     WHERE channel = $1::text),
  expired AS (
    SELECT o.id,
           EXISTS (SELECT 1 FROM cyclium_bus_positions p
                    WHERE p.channel = $1::text AND (p.type IS NULL OR p.type = o.type)
                      AND NOT pg_visible_in_snapshot(o.tx_id, p.position)) AS undispatched,
           o.created_at < now() - make_interval(secs => $4::double precision / 1000) AS overdue
      FROM examined o WHERE o.expired),
  doomed AS (SELECT id, undispatched FROM expired WHERE NOT undispatched OR overdue),
  deleted AS (DELETE FROM cyclium_events WHERE id = ANY (ARRAY(SELECT id FROM doomed))
              RETURNING id),
  last AS (
    SELECT tx_id, id, NOT expired AND created_at <= now() AS young
      FROM examined ORDER BY tx_id DESC, id DESC LIMIT 1)
  SELECT coalesce((SELECT held FROM lock), false) AS held,
         (SELECT count(*) FROM deleted)::int AS deleted,
         (SELECT count(*) FROM deleted JOIN doomed d USING (id)
          WHERE d.undispatched)::int AS undispatched,
         (SELECT count(*) FROM examined)::int AS examined,
         (SELECT tx_id::text FROM last) AS last_tx_id,
         (SELECT id::text FROM last) AS last_id,
         coalesce((SELECT young FROM last), false) AS young`,
);

/** A channel's two windows of retention (see PRUNE). */
export interface PruneWindows {
  /** Delete a row older than this once every position on the channel has passed it. */
  readonly olderThanMs: number;
  /** Delete a row older than this whatever the positions. */
  readonly undispatchedMs: number;
}

/** Where a batch of retention stopped in its channel's order: the next batch reads after it. */
export interface PruneKey {
  readonly txId: string;
  readonly id: string;
}

/** What one batch of retention did (EventLog.prune). */
export interface PruneBatch {
  /** False when another node of the channel was pruning: this one read nothing. */
  held: boolean;
  deleted: number;
  /** Of `deleted`, the events some consumer had not dispatched (older than `undispatchedMs`). */
  undispatched: number;
  /** The channel's rows read; fewer than the limit means the end of the channel. */
  examined: number;
  /** The last row read: the next batch's `after`. */
  last: PruneKey | null;
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

interface PruneRow {
  held: boolean;
  deleted: number;
  undispatched: number;
  examined: number;
  last_tx_id: string | null;
  last_id: string | null;
  young: boolean;
}

interface EventRow {
  snapshot?: string;
  taken: string | null;
  payload_bytes: string | null;
  signature: string | null;
  id: string | null;
  tx_id: string;
  created_ms: number;
  event_id: string;
  type: string;
  payload: unknown;
  /** A Date, or what pg makes of a timestamp JavaScript cannot hold (`infinity`: a number). */
  published_at: unknown;
  /** Whatever the row holds: read through asTraceContext. */
  trace_context: unknown;
  age_ms: number;
}

/**
 * `value` as an ISO time when it is a Date JavaScript can print; else the row's stored time (a
 * hostile row).
 */
function isoTime(value: unknown, fallbackMs: number): string {
  const valid = value instanceof Date && Number.isFinite(value.getTime());
  return (valid ? value : new Date(fallbackMs)).toISOString();
}

/**
 * Every statement on cyclium_events: the reads and retention here, the appends through
 * EventAppender.
 */
export class EventLog {
  private readonly appender: EventAppender;

  constructor(private readonly scope: EventLogScope) {
    this.appender = new EventAppender(scope);
  }

  get channel(): string {
    return this.scope.channel;
  }

  get stackSlug(): string | null {
    return this.scope.stackSlug;
  }

  get env(): string | null {
    return this.scope.env;
  }

  /**
   * Stores `events` (ids already stored are compared, not written); one outcome per event, in
   * order.
   */
  append(sql: SqlExecutor, events: readonly StorableEvent[]): Promise<AppendOutcome[]> {
    return this.appender.append(sql, events);
  }

  /**
   * EventAppender.fragment: the append as the body of a CTE of a larger statement, writing only
   * when `when` holds.
   */
  appendFragment(statement: Statement, events: readonly StorableEvent[], when: string): string {
    return this.appender.fragment(statement, events, when);
  }

  async snapshot(sql: SqlExecutor): Promise<DbSnapshot> {
    const { rows } = await sql.query<{ snapshot: string }>(SNAPSHOT([]));
    return parseSnapshot(rows[0]?.snapshot ?? '');
  }

  /**
   * Rows new since `from`, and the snapshot they were read with; `more` when a limit (rows or
   * bytes) cut the read.
   */
  async readAfter(
    sql: SqlExecutor,
    from: DbSnapshot,
    limit: number,
    maxBytes = READ_MAX_BYTES,
  ): Promise<EventPage & { snapshot: DbSnapshot }> {
    const { rows } = await sql.query<EventRow>(
      READ_AFTER([this.scope.channel, from.xmax, from.xip, limit, maxBytes]),
    );
    const snapshot = parseSnapshot(rows[0]?.snapshot ?? '');
    const events = rows.filter((r) => r.id !== null);
    return {
      events: events.map((r) => this.toLogged(r, maxBytes)),
      more: isCut(events, limit),
      snapshot,
    };
  }

  /**
   * Rows new since `from` and visible in `to`, after `after` (from the start when absent); `more`
   * as readAfter's.
   */
  async readPage(
    sql: SqlExecutor,
    from: DbSnapshot,
    to: DbSnapshot,
    after: LoggedEvent | undefined,
    limit: number,
    maxBytes = READ_MAX_BYTES,
  ): Promise<EventPage> {
    const { rows } = await sql.query<EventRow>(
      READ_PAGE([
        this.scope.channel,
        from.xmax,
        from.xip,
        to.text,
        after?.txId ?? '0',
        after?.id ?? '0',
        limit,
        maxBytes,
      ]),
    );
    return { events: rows.map((r) => this.toLogged(r, maxBytes)), more: isCut(rows, limit) };
  }

  private toLogged(row: EventRow, maxBytes: number): LoggedEvent {
    const publishedAt = isoTime(row.published_at, row.created_ms);
    const traceContext = asTraceContext(row.trace_context);
    const event: BusEvent = {
      type: row.type,
      eventId: row.event_id,
      payload: row.payload,
      publishedAt,
      ...(traceContext === undefined ? {} : { traceContext }),
    };
    const { integrity, channel } = this.scope;
    const trusted =
      !integrity || !isReservedType(row.type) || integrity.verify(channel, event, row.signature);
    const bytes = Number(row.payload_bytes ?? 0);
    const oversizedBytes = bytes > maxBytes ? bytes : null;
    const { created_ms: committedAt, age_ms: ageMs } = row;
    return {
      id: row.id as string,
      txId: row.tx_id,
      committedAt,
      ageMs,
      event,
      trusted,
      oversizedBytes,
    };
  }

  /**
   * One batch of retention on this channel after `after` (see PRUNE); nothing while another node of
   * it prunes.
   */
  async prune(
    sql: SqlExecutor,
    windows: PruneWindows,
    limit: number,
    after?: PruneKey,
  ): Promise<PruneBatch> {
    const from = [after?.txId ?? '0', after?.id ?? '0'];
    const values = [
      this.scope.channel,
      windows.olderThanMs,
      limit,
      windows.undispatchedMs,
      ...from,
    ];
    const { rows } = await sql.query<PruneRow>(PRUNE(values));
    const row = rows[0];
    if (!row)
      return { held: false, deleted: 0, undispatched: 0, examined: 0, last: null, young: false };
    const { held, deleted, undispatched, examined, young } = row;
    const last =
      row.last_tx_id === null || row.last_id === null
        ? null
        : { txId: row.last_tx_id, id: row.last_id };
    return { held, deleted, undispatched, examined, last, young };
  }
}
