import type { SqlExecutor } from '../sql/sql-executor.js';
import { parseSnapshot, type DbSnapshot } from './db-snapshot.js';

/**
 * A consumer without a row starts where this node's reader starts (its boot snapshot): a new
 * expectation dispatches what is published from now on, not the channel's history. The CTE's read
 * of the table does not see its own insert, so each consumer comes back exactly once. The row
 * names the consumer's event type: retention holds only that type for it (see EventLog.prune).
 */
const OPEN = `
  WITH opened AS (
    INSERT INTO cyclium_bus_positions (channel, consumer, position, type)
    SELECT $1, c.consumer, $3::pg_snapshot, c.type FROM unnest($2::text[], $4::text[]) AS c (consumer, type)
    ON CONFLICT (channel, consumer) DO NOTHING
    RETURNING consumer, position)
  SELECT consumer, position::text AS position FROM opened
  UNION ALL
  SELECT consumer, position::text FROM cyclium_bus_positions WHERE channel = $1 AND consumer = ANY($2::text[])`;

/**
 * Moves positions forward only: a snapshot with a larger xmax was taken later and sees every
 * transaction the older one saw, so whichever node settled further wins and none moves one back.
 * It also stamps the consumer's type on a row a previous release wrote without one.
 */
const ADVANCE = `
  UPDATE cyclium_bus_positions p
     SET position = a.position::pg_snapshot, type = a.type, updated_at = now()
    FROM unnest($2::text[], $3::text[], $4::text[]) AS a (consumer, position, type)
   WHERE p.channel = $1 AND p.consumer = a.consumer
     AND pg_snapshot_xmax(p.position) < pg_snapshot_xmax(a.position::pg_snapshot)`;

const SKIP = `
  UPDATE cyclium_bus_positions SET skipped = skipped + 1, last_skip = $3, updated_at = now()
   WHERE channel = $1 AND consumer = $2`;

/** A consumer by its name, with the event type it takes. */
export interface NamedConsumer {
  readonly name: string;
  readonly type: string;
}

/** A consumer's position to store. */
export interface SettledPosition {
  readonly consumer: NamedConsumer;
  readonly position: DbSnapshot;
}

type Positions = Map<string, DbSnapshot>;

/** Every statement on cyclium_bus_positions (retention reads it too: see EventLog.prune). */
export class BusPositions {
  constructor(private readonly channel: string) {}

  /** The stored positions of `consumers`, creating a row at `start` for each that has none. */
  async open(sql: SqlExecutor, consumers: readonly NamedConsumer[], start: DbSnapshot): Promise<Positions> {
    const params = [this.channel, consumers.map((c) => c.name), start.text, consumers.map((c) => c.type)];
    const { rows } = await sql.query<{ consumer: string; position: string }>(OPEN, params);
    return new Map(rows.map((row) => [row.consumer, parseSnapshot(row.position)]));
  }

  /** Stores each consumer's position where it is further than the stored one (one entry per name). */
  async advance(sql: SqlExecutor, positions: readonly SettledPosition[]): Promise<void> {
    if (positions.length === 0) return;
    const names = positions.map((p) => p.consumer.name);
    const types = positions.map((p) => p.consumer.type);
    await sql.query(ADVANCE, [this.channel, names, positions.map((p) => p.position.text), types]);
  }

  /** Records that `consumer` skipped an event it could not dispatch, with the reason. */
  async skipped(sql: SqlExecutor, consumer: string, reason: string): Promise<void> {
    await sql.query(SKIP, [this.channel, consumer, reason.slice(0, 2_000)]);
  }
}
