/**
 * Rows written straight into the tables, shared by the benches and the tests that need a history
 * or a backlog too large to make through the library: one statement each, so the shape is the point.
 */
import type pg from 'pg';

/** `count` running episodes of `actor.expectation` owned by `owner`, a node that never beat, quiet for ten minutes. */
export async function insertOrphans(
  db: pg.Pool,
  actor: string,
  expectation: string,
  count: number,
  owner = 'node-dead',
): Promise<void> {
  await db.query(
    `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status, owner_node, started_at, inserted_at)
     SELECT $1, $2, 'manual', jsonb_build_object('type', 'manual', 'payload', jsonb_build_object('i', i)), 'running', $4,
            now() - interval '10 minutes', now() - interval '10 minutes'
       FROM generate_series(1, $3::int) i`,
    [actor, expectation, count, owner],
  );
}

/**
 * `kept` events at the lowest ids of `channel`, committed after a consumer's position was taken
 * (so it has not dispatched them), and `expired` events behind them; every one created two hours ago,
 * past the default retention window. The caller deletes the channel's rows and position after.
 */
export async function insertEventsBehindUndispatched(
  db: pg.Pool,
  channel: string,
  kept: number,
  expired: number,
): Promise<void> {
  const first = await db.connect();
  try {
    await first.query('BEGIN');
    await first.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'kept-' || g, 't', '{}', now(), now() - interval '2 hours' FROM generate_series(1, $2::int) g`,
      [channel, kept],
    );
    await db.query(
      `INSERT INTO cyclium_events (channel, event_id, type, payload, published_at, created_at)
       SELECT $1, 'gone-' || g, 't', '{}', now(), now() - interval '2 hours' FROM generate_series(1, $2::int) g`,
      [channel, expired],
    );
    await db.query(
      `INSERT INTO cyclium_bus_positions (channel, consumer, position) VALUES ($1, 'slow.reader', pg_current_snapshot())`,
      [channel],
    );
    await first.query('COMMIT');
  } finally {
    first.release();
  }
}
