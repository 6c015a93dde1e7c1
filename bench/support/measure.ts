import pg from 'pg';

/**
 * Runs `operation` from `clients` concurrent connections for `durationMs` and returns
 * operations per second. Each client gets its own connection and a counter `i` unique across clients.
 */
export async function throughput(
  pool: pg.Pool,
  clients: number,
  durationMs: number,
  operation: (client: pg.PoolClient, i: number) => Promise<unknown>,
): Promise<number> {
  let next = 0;
  let done = 0;
  const connections = await Promise.all(Array.from({ length: clients }, () => pool.connect()));
  const deadline = performance.now() + durationMs;
  const started = performance.now();
  try {
    await Promise.all(
      connections.map(async (client) => {
        while (performance.now() < deadline) {
          await operation(client, next++);
          done++;
        }
      }),
    );
  } finally {
    for (const client of connections) client.release();
  }
  return done / ((performance.now() - started) / 1000);
}

/** The floor every benchmark compares against: a bare single-row INSERT, one commit each. */
export async function bareInsertFloor(
  pool: pg.Pool,
  clients: number,
  durationMs: number,
): Promise<number> {
  await pool.query('CREATE TABLE IF NOT EXISTS bench_floor (k text PRIMARY KEY, v int NOT NULL)');
  await pool.query('TRUNCATE bench_floor');
  const run = Math.random().toString(36).slice(2);
  return throughput(pool, clients, durationMs, (client, i) =>
    client.query('INSERT INTO bench_floor (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING', [
      `${run}:${i}`,
      i,
    ]),
  );
}

export function printTable(title: string, rows: Array<Record<string, string | number>>): void {
  process.stdout.write(`\n${title}\n`);
  console.table(rows);
}

/** `bareInsertFloor` for 1.5 s at `clients` concurrency, on a pool of its own. */
export async function insertFloor(url: string, clients: number): Promise<number> {
  const pool = new pg.Pool({ connectionString: url, max: clients });
  pool.on('error', () => undefined);
  try {
    return await bareInsertFloor(pool, clients, 1_500);
  } finally {
    await pool.end();
  }
}

/**
 * Units of work a throughput configuration runs first, uncounted: the pool opens its connections,
 * statements get prepared and V8 optimises the hot path, so the figure is steady state.
 */
export const WARM_UP = 200;

/**
 * Starts `n` units of work with `start(i)`, keeping at most `inFlight` unfinished at once, and
 * resolves when `n` completions were reported through `onDone` (which returns its unsubscribe).
 * Starts are not serialised: like `inFlight` independent callers, each begins as soon as a slot
 * frees, so the start path is measured at the same concurrency as the floor it is compared with.
 */
export function keepInFlight(
  n: number,
  inFlight: number,
  start: (i: number) => Promise<unknown>,
  onDone: (done: () => void) => () => void,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let issued = 0;
    let completed = 0;
    const refill = () => {
      while (issued < n && issued - completed < inFlight) start(issued++).catch(fail);
    };
    const off = onDone(() => {
      completed++;
      if (completed === n) {
        off();
        resolve();
      } else refill();
    });
    const fail = (error: unknown) => {
      off();
      reject(error);
    };
    refill();
  });
}
