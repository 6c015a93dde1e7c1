import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { BusEvent } from './bus.interface.js';
import { isReservedType } from './reserved-types.js';

/** An event ready to store: its payload already serialised (and checked) as JSON text. */
export interface StorableEvent {
  readonly event: BusEvent;
  readonly payloadJson: string;
}

/**
 * Where the stamp of a row comes from: the stack, env and node that wrote it, and how reserved
 * events are signed.
 */
export interface EventLogScope {
  readonly channel: string;
  readonly stackSlug: string | null;
  readonly env: string | null;
  readonly publisher: () => string;
  /**
   * Signs and verifies the library's reserved events (the `integrity` option); absent, nothing is
   * signed.
   */
  readonly integrity?: EventIntegrity;
}

/**
 * The `integrity` option as the bus sees it: a signature over a reserved event on a channel, and
 * its check.
 */
export interface EventIntegrity {
  sign(channel: string, event: Pick<BusEvent, 'eventId' | 'type' | 'payload'>): string | null;
  verify(
    channel: string,
    event: Pick<BusEvent, 'eventId' | 'type' | 'payload'>,
    signature: string | null,
  ): boolean;
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
 * looks again. Ids must be unique within one call (EventAppender sends repeats to COMPARE).
 */
const APPEND = prepared(
  'events_append_traced',
  `
  WITH e AS MATERIALIZED (
    SELECT * FROM unnest($5::text[], $6::text[], $7::jsonb[], $8::timestamptz[], $9::text[],
                         $10::jsonb[])
      WITH ORDINALITY AS e (event_id, type, payload, published_at, signature, trace_context, n)
  ), stored AS (
    INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher,
                                source_stack, source_env, signature, trace_context)
    SELECT $1, e.event_id, e.type, e.payload, e.published_at, $2, $3, $4, e.signature,
           e.trace_context
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

/**
 * Whether each event equals the one stored under its id, in a fresh snapshot; events whose row is
 * gone are left out.
 */
const COMPARE = prepared(
  'events_compare',
  `
  SELECT e.n::int AS n, o.type = e.type AND o.payload = e.payload AS same
    FROM unnest($2::text[], $3::text[], $4::jsonb[])
      WITH ORDINALITY AS e (event_id, type, payload, n)
    JOIN cyclium_events o ON o.channel = $1 AND o.event_id = e.event_id`,
);

/**
 * A row that vanished between the conflict and the look (retention) is inserted again; this many
 * rounds at most.
 */
const APPEND_ROUNDS = 3;

/**
 * What happened to one event of an append: `stored` now, already stored as the `same` event (a
 * retry), or already stored with another type or payload (a `conflict`: nothing was written).
 */
export type AppendOutcome = 'stored' | 'same' | 'conflict';

/**
 * Stores events on cyclium_events, stamped with the scope: checked appends, and appends inside a
 * larger statement.
 */
export class EventAppender {
  constructor(private readonly scope: EventLogScope) {}

  /**
   * Stores `events` (ids already stored are compared, not written); one outcome per event, in
   * order.
   */
  async append(sql: SqlExecutor, events: readonly StorableEvent[]): Promise<AppendOutcome[]> {
    const outcomes: Array<AppendOutcome | undefined> = new Array<AppendOutcome | undefined>(
      events.length,
    ).fill(undefined);
    let open = events.map((_, i) => i);
    for (let round = 0; open.length > 0; round++) {
      if (round === APPEND_ROUNDS)
        throw new Error(
          `bus: could not settle event ${events[open[0] as number]?.event.eventId} (its stored ` +
            `row keeps vanishing)`,
        );
      open = await this.appendRound(sql, events, open, outcomes);
    }
    return outcomes as AppendOutcome[];
  }

  /**
   * One insert of the first event per id among `open`, then one look at the rest; returns what is
   * still unsettled.
   */
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
    const { rows } = await sql.query<{ n: number; same: boolean | null }>(
      APPEND([channel, publisher(), stackSlug, env, ...this.columns(batch)]),
    );
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
    const { rows } = await sql.query<{ n: number; same: boolean }>(
      COMPARE([this.scope.channel, ...this.columns(batch).slice(0, 3)]),
    );
    for (const row of rows) outcomes[indexes[row.n - 1] as number] = row.same ? 'same' : 'conflict';
    return indexes.filter((i) => outcomes[i] === undefined);
  }

  /**
   * The batch as the unnest() arrays every append and compare statement takes: ids, types,
   * payloads, publish times, signatures (the library's reserved events, with `integrity`) and
   * trace contexts (as JSON text).
   */
  private columns(
    batch: readonly StorableEvent[],
  ): [string[], string[], string[], string[], Array<string | null>, Array<string | null>] {
    const { channel, integrity } = this.scope;
    const signatureOf = (e: StorableEvent) =>
      integrity && isReservedType(e.event.type)
        ? integrity.sign(channel, { ...e.event, payload: JSON.parse(e.payloadJson) as unknown })
        : null;
    return [
      batch.map((e) => e.event.eventId),
      batch.map((e) => e.event.type),
      batch.map((e) => e.payloadJson),
      batch.map((e) => e.event.publishedAt),
      batch.map(signatureOf),
      batch.map((e) => (e.event.traceContext ? JSON.stringify(e.event.traceContext) : null)),
    ];
  }

  /**
   * APPEND as the body of a CTE of a larger statement, writing only when `when` holds (`e.n` is an
   * event's 1-based position). Without a conflict arbiter or a compare: the library calls it only
   * with ids it has just minted, which no stored event can share, and an arbiter would make each
   * row a speculative insert (a second WAL record to confirm it).
   */
  fragment(statement: Statement, events: readonly StorableEvent[], when: string): string {
    const { channel, stackSlug, env, publisher } = this.scope;
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const [ids, types, payloads, times, signatures, traces] = this.columns(events);
    return `
      INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, publisher,
                                  source_stack, source_env, signature, trace_context)
      SELECT ${p(channel, 'text')}, e.event_id, e.type, e.payload, e.published_at,
             ${p(publisher(), 'text')}, ${p(stackSlug, 'text')}, ${p(env, 'text')},
             e.signature, e.trace_context
        FROM unnest(${p(ids, 'text[]')}, ${p(types, 'text[]')}, ${p(payloads, 'jsonb[]')},
                    ${p(times, 'timestamptz[]')}, ${p(signatures, 'text[]')},
                    ${p(traces, 'jsonb[]')})
             WITH ORDINALITY AS e (event_id, type, payload, published_at, signature,
                                   trace_context, n)
       WHERE (${when})
       ORDER BY e.n
      RETURNING 1`;
  }
}
