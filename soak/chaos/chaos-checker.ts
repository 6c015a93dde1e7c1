/**
 * The chaos soak's verdict on the database's history: exactly one episode per accepted event and
 * subscribed expectation, every episode ended (done; a restart past its attempts may end orphaned),
 * no rebalance step ran again after its checkpoint, and nothing left live.
 */
import pg from 'pg';
import { text, type History } from '../checker/audit-reader.js';
import type { AcceptedEvent } from './chaos-load.js';

const SUBSCRIBER: Record<AcceptedEvent['type'], string> = {
  'resource.updated': 'resource_monitor.check_resource_limits',
  'resource.rebalance': 'resource_rebalancer.rebalance',
};

export async function checkChaos(
  databaseUrl: string,
  history: History,
  accepted: AcceptedEvent[],
): Promise<string[]> {
  const violations: string[] = [];
  const byEvent = new Map<string, string[]>();
  for (const episode of history.episodes.values()) {
    if (!episode.eventId) continue;
    const key = `${episode.eventId}|${episode.actor}.${episode.expectation}`;
    byEvent.set(key, [...(byEvent.get(key) ?? []), episode.id]);
  }
  for (const event of accepted) {
    const episodes = byEvent.get(`${event.eventId}|${SUBSCRIBER[event.type]}`) ?? [];
    if (episodes.length !== 1)
      violations.push(
        `event ${event.eventId} (${event.type}, 202) ran ${episodes.length} episodes: ${episodes.join(', ')}`,
      );
  }
  for (const episode of history.episodes.values()) {
    const last = episode.last;
    const status = String(last.status);
    const errorClass = last.error_class ? text(last.error_class) : null;
    if (status === 'done') continue;
    const spent = Number(last.attempts ?? 0) >= Number(last.max_attempts ?? 3);
    if (status === 'failed' && errorClass === 'orphaned' && spent) continue;
    const detail = text(last.error_detail).slice(0, 160);
    violations.push(
      `episode ${episode.id} (${episode.actor}.${episode.expectation}) ended ${status}/${errorClass} ${detail}`,
    );
  }
  const db = new pg.Client({ connectionString: databaseUrl });
  db.on('error', () => undefined);
  await db.connect();
  try {
    // A step's side effect after the journal row that checkpointed it.
    const reran = await db.query<{ episode_id: string; step: string; late_ms: number }>(`
      SELECT l.episode_id, l.step, round(extract(epoch FROM l.at - j.at) * 1000)::int AS late_ms
        FROM demo_rebalance_log l
        JOIN LATERAL (SELECT min(a.at) AS at FROM fs_audit a
                       WHERE a.tbl = 'cyclium_episode_steps' AND a.op = 'INSERT' AND a.key = l.episode_id::text
                         AND a.row ->> 'kind' = 'step' AND a.row ->> 'name' = l.step) j ON true
       WHERE j.at IS NOT NULL AND l.at > j.at`);
    for (const r of reran.rows)
      violations.push(
        `rebalance ${r.episode_id} ran ${r.step} again ${r.late_ms} ms after its checkpoint`,
      );
  } finally {
    await db.end();
  }
  return violations;
}
