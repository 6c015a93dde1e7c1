import { readFileSync } from 'node:fs';
import pg from 'pg';

/** Clock ticks per second of /proc/<pid>/stat on Linux. */
const TICKS_PER_SECOND = 100;

/** CPU time (user + system, ms) a process has used, or undefined when /proc does not show it. */
function cpuMsOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

export interface CpuWindow {
  /** CPU ms of the measured process over the window. */
  processMs: number;
  /** CPU ms of the database server's processes over the window; undefined when not on this host. */
  databaseMs: number | undefined;
  wallMs: number;
}

/**
 * CPU spent by one process and by the database server between `start` and the returned `stop`.
 * The server's processes are those pg_stat_activity lists (backends and auxiliary processes);
 * when `url` is another host's server, /proc does not have them and `databaseMs` is undefined.
 */
export async function cpuWindow(url: string, pid: number): Promise<() => Promise<CpuWindow>> {
  const serverPids = async (): Promise<number[]> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity');
      return rows.map((r) => r.pid);
    } finally {
      await client.end();
    }
  };
  const pids = await serverPids();
  const before = new Map(pids.map((p) => [p, cpuMsOf(p) ?? 0]));
  const processBefore = cpuMsOf(pid) ?? 0;
  const started = performance.now();
  return async () => {
    const wallMs = performance.now() - started;
    const processMs = (cpuMsOf(pid) ?? 0) - processBefore;
    // A process that started within the window (a pool growing to the load) counts whole; one
    // that ended within it is lost to the count (rare: pools keep their connections for seconds).
    let databaseMs: number | undefined = 0;
    let seen = 0;
    for (const p of new Set([...before.keys(), ...(await serverPids())])) {
      const now = cpuMsOf(p);
      if (now === undefined) continue;
      databaseMs += now - (before.get(p) ?? 0);
      seen++;
    }
    if (seen === 0) databaseMs = undefined;
    return { processMs, databaseMs, wallMs };
  };
}
