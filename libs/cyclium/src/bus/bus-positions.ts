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
    SELECT $1, c.consumer, $3::pg_snapshot, c.type
      FROM unnest($2::text[], $4::text[]) AS c (consumer, type)
    ON CONFLICT (channel, consumer) DO NOTHING
    RETURNING consumer, position)
  SELECT consumer, position::text AS position FROM opened
  UNION ALL
  SELECT consumer, position::text FROM cyclium_bus_positions WHERE channel = $1
    AND consumer = ANY($2::text[])`;

/**
 * Moves positions forward only: a snapshot with a larger xmax was taken later and sees every
 * transaction the older one saw, so whichever node settled further wins and none moves one back.
 * It also stamps the consumer's type on a row a previous release wrote without one, and writes the
 * row again if an operator dropped it while this node still hosts its consumer (BusConsumers.drop).
 */
const ADVANCE = `
  INSERT INTO cyclium_bus_positions AS p (channel, consumer, position, type)
  SELECT $1, a.consumer, a.position::pg_snapshot, a.type
    FROM unnest($2::text[], $3::text[], $4::text[]) AS a (consumer, position, type)
  ON CONFLICT (channel, consumer) DO UPDATE
     SET position = EXCLUDED.position, type = EXCLUDED.type, updated_at = now()
   WHERE pg_snapshot_xmax(p.position) < pg_snapshot_xmax(EXCLUDED.position)`;

const SKIP = `
  UPDATE cyclium_bus_positions SET skipped = skipped + 1, last_skip = $3, updated_at = now()
   WHERE channel = $1 AND consumer = $2`;

/**
 * Every stored position, for the cluster status: a consumer no live node hosts any more holds its
 * channel's events.
 */
export const STORED_POSITIONS = `
  coalesce((SELECT json_agg(json_build_object('channel', channel, 'consumer', consumer, 'type',
                                              type,
                                              'updatedAt', updated_at, 'skipped', skipped,
                                              'lastSkip', last_skip)
                            ORDER BY channel, consumer)
              FROM cyclium_bus_positions), '[]')`;

/** One stored position, as STORED_POSITIONS reads it. */
export interface StoredPosition {
  channel: string;
  consumer: string;
  type: string | null;
  updatedAt: string;
  skipped: number;
  lastSkip: string | null;
}

const DROP =
  `DELETE FROM cyclium_bus_positions WHERE channel = $1 AND consumer = $2 RETURNING ` + `consumer`;

/** Deletes the stored position of `consumer` on `channel`; false when there was none. */
export async function dropPosition(
  sql: SqlExecutor,
  channel: string,
  consumer: string,
): Promise<boolean> {
  const { rows } = await sql.query(DROP, [channel, consumer]);
  return rows.length > 0;
}

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
  async open(
    sql: SqlExecutor,
    consumers: readonly NamedConsumer[],
    start: DbSnapshot,
  ): Promise<Positions> {
    const params = [
      this.channel,
      consumers.map((c) => c.name),
      start.text,
      consumers.map((c) => c.type),
    ];
    const { rows } = await sql.query<{ consumer: string; position: string }>(OPEN, params);
    return new Map(rows.map((row) => [row.consumer, parseSnapshot(row.position)]));
  }

  /**
   * Stores each consumer's position where it is further than the stored one (one entry per name).
   */
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
