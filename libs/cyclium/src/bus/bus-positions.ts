import type { SqlExecutor } from '../sql/sql-executor.js';
import { parseSnapshot, type DbSnapshot } from './db-snapshot.js';

/**
 * A consumer without a row starts where this node's reader starts (its boot snapshot): a new
 * expectation dispatches what is published from now on, not the channel's history. The CTE's read
 * of the table does not see its own insert, so each consumer comes back exactly once.
 */
const OPEN = `
  WITH opened AS (
    INSERT INTO cyclium_bus_positions (channel, consumer, position)
    SELECT $1, c, $3::pg_snapshot FROM unnest($2::text[]) AS c
    ON CONFLICT (channel, consumer) DO NOTHING
    RETURNING consumer, position)
  SELECT consumer, position::text AS position FROM opened
  UNION ALL
  SELECT consumer, position::text FROM cyclium_bus_positions WHERE channel = $1 AND consumer = ANY($2::text[])`;

/**
 * Moves positions forward only: a snapshot with a larger xmax was taken later and sees every
 * transaction the older one saw, so whichever node settled further wins and none moves one back.
 */
const ADVANCE = `
  UPDATE cyclium_bus_positions p
     SET position = a.position::pg_snapshot, updated_at = now()
    FROM unnest($2::text[], $3::text[]) AS a (consumer, position)
   WHERE p.channel = $1 AND p.consumer = a.consumer
     AND pg_snapshot_xmax(p.position) < pg_snapshot_xmax(a.position::pg_snapshot)`;

const SKIP = `
  UPDATE cyclium_bus_positions SET skipped = skipped + 1, last_skip = $3, updated_at = now()
   WHERE channel = $1 AND consumer = $2`;

/** Every statement on cyclium_bus_positions (retention reads it too: see EventLog.prune). */
export class BusPositions {
  constructor(private readonly channel: string) {}

  /** The stored positions of `consumers`, creating a row at `start` for each that has none. */
  async open(sql: SqlExecutor, consumers: readonly string[], start: DbSnapshot): Promise<Map<string, DbSnapshot>> {
    const { rows } = await sql.query<{ consumer: string; position: string }>(OPEN, [this.channel, consumers, start.text]);
    return new Map(rows.map((row) => [row.consumer, parseSnapshot(row.position)]));
  }

  async advance(sql: SqlExecutor, positions: ReadonlyMap<string, DbSnapshot>): Promise<void> {
    if (positions.size === 0) return;
    const consumers = [...positions.keys()];
    await sql.query(ADVANCE, [this.channel, consumers, consumers.map((c) => (positions.get(c) as DbSnapshot).text)]);
  }

  /** Records that `consumer` skipped an event it could not dispatch, with the reason. */
  async skipped(sql: SqlExecutor, consumer: string, reason: string): Promise<void> {
    await sql.query(SKIP, [this.channel, consumer, reason.slice(0, 2_000)]);
  }
}
