import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { SharedRead } from '../primitives/shared-read.js';

/** The longest history `FinishedHistoryReader.read` answers, in minutes: a day. */
export const MAX_HISTORY_MINUTES = 1_440;

/** The episodes that finished within one minute, by terminal status. */
export interface FinishedMinute {
  /** The start of the minute, by the database's clock. */
  minute: Date;
  done: number;
  failed: number;
  partiallyFailed: number;
  canceled: number;
}

/** Finished episodes per minute, oldest minute first; the last one is the minute under way. */
export interface FinishedHistory {
  /** The database's clock when it was read. */
  at: Date;
  minutes: number;
  /** One per minute, `minutes` of them, minutes in which nothing finished included. */
  buckets: FinishedMinute[];
}

/**
 * One statement over the index on `finished_at` (which includes the status: an index-only range
 * scan), bounded on both sides for the reason CLUSTER_STATUS gives; generate_series supplies the
 * minutes in which nothing finished. Started episodes are not counted: no index serves
 * `started_at`, and counting them would read the table.
 */
const FINISHED_HISTORY = `
  SELECT now() AS at, m.minute,
         coalesce(f.done, 0) AS done, coalesce(f.failed, 0) AS failed,
         coalesce(f.partially_failed, 0) AS partially_failed, coalesce(f.canceled, 0) AS canceled
    FROM generate_series(date_trunc('minute', now()) - make_interval(mins => $1::int - 1),
                         date_trunc('minute', now()), interval '1 minute') AS m(minute)
    LEFT JOIN (
      SELECT date_trunc('minute', finished_at) AS minute,
             count(*) FILTER (WHERE status = 'done')::int AS done,
             count(*) FILTER (WHERE status = 'failed')::int AS failed,
             count(*) FILTER (WHERE status = 'partially_failed')::int AS partially_failed,
             count(*) FILTER (WHERE status = 'canceled')::int AS canceled
        FROM cyclium_episodes
       WHERE finished_at >= date_trunc('minute', now()) - make_interval(mins => $1::int - 1)
         AND finished_at < now() + interval '1 minute'
       GROUP BY 1) f USING (minute)
   ORDER BY m.minute`;

interface Row {
  at: Date;
  minute: Date;
  done: number;
  failed: number;
  partially_failed: number;
  canceled: number;
}

/**
 * Reads how many episodes finished per minute, for the operations page's chart. Callers within a
 * second share one read: a page open in many browsers costs one statement.
 */
@Injectable()
export class FinishedHistoryReader {
  private readonly reads = new SharedRead<number, FinishedHistory>();

  constructor(private readonly database: CycliumDataSource) {}

  /** The last `minutes` minutes (1 to MAX_HISTORY_MINUTES), the one under way included. */
  read(minutes: number): Promise<FinishedHistory> {
    if (!Number.isInteger(minutes) || minutes < 1 || minutes > MAX_HISTORY_MINUTES)
      throw new RangeError(
        `history: minutes must be a whole number from 1 to ${MAX_HISTORY_MINUTES} ` +
          `(got ${String(minutes)})`,
      );
    return this.reads.get(minutes, 1_000, () => this.query(minutes));
  }

  private async query(minutes: number): Promise<FinishedHistory> {
    const { rows } = await this.database.sql.query<Row>(FINISHED_HISTORY, [minutes]);
    // generate_series gives at least one row: minutes is at least 1.
    const [first] = rows;
    return {
      at: first.at,
      minutes,
      buckets: rows.map((r) => ({
        minute: r.minute,
        done: r.done,
        failed: r.failed,
        partiallyFailed: r.partially_failed,
        canceled: r.canceled,
      })),
    };
  }
}
