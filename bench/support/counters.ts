import pg from 'pg';

/**
 * Commits and statements so far in this database. Read on a short-lived connection: a backend
 * that stays idle in a pool flushes its statistics late and would leak its commits into the next
 * measurement. Statements come from pg_stat_statements when the server has it loaded (every
 * statement any backend ran, BEGIN and COMMIT included), otherwise from a count of what this
 * process sent through pg (`source` says which).
 */
export interface Counts {
  commits: number;
  statements: number;
}

let sentByThisProcess = 0;
let patched = false;

/** Counts every query this process sends through pg.Client (the fallback when the server cannot count). */
function countAtTheDriver(): void {
  if (patched) return;
  patched = true;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called below with apply(this)
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    sentByThisProcess++;
    return original.apply(this, args);
  } as typeof pg.Client.prototype.query;
}

const sources = new Map<string, 'pg_stat_statements' | 'driver'>();

/** Where statements are counted for this database (the extension is created in it when the server has the library). */
export async function statementSource(url: string): Promise<'pg_stat_statements' | 'driver'> {
  const known = sources.get(url);
  if (known) return known;
  let source: 'pg_stat_statements' | 'driver';
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await client.query('SELECT count(*) FROM pg_stat_statements');
    source = 'pg_stat_statements';
  } catch {
    source = 'driver';
    countAtTheDriver();
  } finally {
    await client.end();
  }
  sources.set(url, source);
  return source;
}

export async function countsSoFar(url: string): Promise<Counts> {
  const from = await statementSource(url);
  const before = sentByThisProcess;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT (SELECT xact_commit::bigint FROM pg_stat_database WHERE datname = current_database()) AS commits,
              ${from === 'pg_stat_statements' ? `(SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()))` : '0'} AS statements`,
    );
    const statements = from === 'pg_stat_statements' ? Number(rows[0].statements) : before;
    return { commits: Number(rows[0].commits), statements };
  } finally {
    await client.end();
  }
}

/** What happened between two readings, less the reading's own statement and commit. */
export function since(before: Counts, after: Counts): Counts {
  return {
    commits: after.commits - before.commits - 1,
    statements: after.statements - before.statements - 1,
  };
}

/** Waits until backends that exited have flushed their statistics. */
export const settleStats = () => new Promise((resolve) => setTimeout(resolve, 1_500));

/**
 * Waits until backends that stay connected (a warmed-up pool) have flushed theirs: an idle
 * backend with pending statistics flushes them after 10 s (PGSTAT_IDLE_INTERVAL), so commits made
 * before a measurement do not leak into it.
 */
export const settleIdleStats = () => new Promise((resolve) => setTimeout(resolve, 11_000));
