import pg from 'pg';

/**
 * Commits so far in this database. Read on a short-lived connection: a backend that stays idle in
 * a pool flushes its statistics late and would leak its commits into the next measurement.
 */
export async function commitsSoFar(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(`SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()`);
    return Number(rows[0].n);
  } finally {
    await client.end();
  }
}

/** Waits until backends that exited have flushed their statistics. */
export const settleStats = () => new Promise((resolve) => setTimeout(resolve, 1_500));
