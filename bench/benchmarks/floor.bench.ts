import pg from 'pg';
import { bareInsertFloor, printTable } from '../support/measure.js';

/** The floor on this machine and database: bare single-row inserts per second at 1, 4 and 16 clients. */
export async function floorBench(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 16 });
  pool.on('error', () => undefined);
  try {
    const rows = [];
    for (const clients of [1, 4, 16]) {
      rows.push({ clients, 'inserts/s': Math.round(await bareInsertFloor(pool, clients, 3_000)) });
    }
    printTable('floor: bare single-row INSERT … ON CONFLICT DO NOTHING, one commit each', rows);
  } finally {
    await pool.end();
  }
}
