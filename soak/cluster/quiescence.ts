/**
 * The end of a schedule: the cluster is quiet when no episode, trigger request or output is live
 * and nothing that is not retention's own work (an archive, a delete) has moved for QUIET_MS.
 */
import pg from 'pg';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Nothing moved for this long (longer than a bus poll plus a debounce window plus a trigger poll). */
const QUIET_MS = 4_000;

/** What counts as live and as a move: a statement answering `live` (a count) and `moved` (text). */
export interface QuietProbe {
  sql: string;
  quietMs: number;
}

/** Waits until nothing is live and nothing moved for the probe's quietMs; false at the deadline. */
export async function waitForQuiet(
  databaseUrl: string,
  timeoutMs: number,
  probe: QuietProbe = { sql: QUIET_PROBE, quietMs: QUIET_MS },
): Promise<boolean> {
  const db = new pg.Client({ connectionString: databaseUrl });
  db.on('error', () => undefined);
  await db.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    let since = Date.now();
    while (Date.now() < deadline) {
      const { rows } = await db.query<{ live: number; moved: string }>(probe.sql);
      const state = `${rows[0]?.live}:${rows[0]?.moved}`;
      if (state !== last) {
        last = state;
        since = Date.now();
      } else if (rows[0]?.live === 0 && Date.now() - since >= probe.quietMs) {
        return true;
      }
      await sleep(250);
    }
    return false;
  } finally {
    await db.end();
  }
}

/** Live work, and the newest audit row that is not an archive or a delete (retention may go on). */
const QUIET_PROBE = `
  SELECT ((SELECT count(*) FROM cyclium_episodes
            WHERE status IN ('queued', 'deferred', 'waiting', 'running', 'blocked'))
       + (SELECT count(*) FROM cyclium_trigger_requests WHERE status IN ('pending', 'claimed'))
       + (SELECT count(*) FROM cyclium_outputs WHERE status = 'pending'))::int AS live,
         (SELECT coalesce(max(id), 0) FROM fs_audit
           WHERE op = 'INSERT' OR (op = 'UPDATE' AND status IS DISTINCT FROM old_status))::text AS moved`;
