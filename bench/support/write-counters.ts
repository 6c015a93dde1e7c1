import pg from 'pg';

/** What a window wrote: heap tuples from pg_stat_user_tables, index entries and WAL from the WAL. */
export interface Writes {
  inserted: number;
  /** Updates that went HOT (no index entry written). */
  hotUpdated: number;
  /** Updates that wrote a new entry in every index of their table. */
  coldUpdated: number;
  deleted: number;
  /** Row locks (SELECT … FOR SHARE/UPDATE): each one is a WAL record, not a tuple. */
  locks: number | null;
  /** Btree leaf insertions (INSERT_LEAF, INSERT_POST): one per index entry written. */
  indexEntries: number | null;
  walRecords: number;
  walBytes: number;
  /** WAL bytes less full-page images, which depend on where the window falls after a checkpoint. */
  walBytesNoFpi: number | null;
  /** Per relation (table or index) written in the window: WAL records and bytes, per unit. */
  relations: RelationWrites[];
  /** Per WAL record type (resource manager/record type): records and bytes with headers, per unit. */
  kinds: RelationWrites[];
}

export interface RelationWrites {
  relation: string;
  /** Heap inserts, updates, deletes and locks, or btree entries, per unit. */
  records: number;
  bytes: number;
}

export interface WriteMark {
  lsn: string;
  tables: Map<string, number[]>;
}

/**
 * Reads pg_stat_user_tables on a short-lived connection (its own statistics must not leak in) and
 * the WAL position. Backends flush their table statistics at most once a second and when idle
 * for 10 s: call `mark` after the writers closed their connections or sat idle that long.
 */
export async function mark(url: string): Promise<WriteMark> {
  return withClient(url, async (client) => {
    const { rows } = await client.query<{ name: string; c: string[] }>(
      `SELECT schemaname || '.' || relname AS name,
              ARRAY[n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del]::text[] AS c
         FROM pg_stat_user_tables`,
    );
    const lsn = (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn'))
      .rows[0]!.lsn;
    return { lsn, tables: new Map(rows.map((r) => [r.name, r.c.map(Number)])) };
  });
}

/** The WAL position alone, to close a window before the statistics settle. */
export async function walPosition(url: string): Promise<string> {
  return withClient(
    url,
    async (client) =>
      (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!
        .lsn,
  );
}

/**
 * The writes between two marks, per unit of work. `walEnd` closes the WAL window (default: the
 * second mark). With pg_walinspect (a superuser's extension, PostgreSQL 15+) index entries, row
 * locks and WAL without full-page images are counted from the records themselves; without it,
 * those are null.
 */
export async function writesBetween(
  url: string,
  before: WriteMark,
  after: WriteMark,
  units: number,
  walEnd = after.lsn,
): Promise<Writes> {
  const sum = [0, 0, 0, 0];
  for (const [name, counts] of after.tables) {
    const was = before.tables.get(name) ?? [0, 0, 0, 0];
    counts.forEach((c, i) => (sum[i] = (sum[i] ?? 0) + c - (was[i] ?? 0)));
  }
  const [inserted = 0, updated = 0, hot = 0, deleted = 0] = sum;
  const wal = await withClient(url, (client) => walBetween(client, before.lsn, walEnd));
  const per = (n: number | null) => (n === null ? null : n / units);
  return {
    inserted: inserted / units,
    hotUpdated: hot / units,
    coldUpdated: (updated - hot) / units,
    deleted: deleted / units,
    locks: per(wal.locks),
    indexEntries: per(wal.indexEntries),
    walRecords: wal.records / units,
    walBytes: wal.bytes / units,
    walBytesNoFpi: per(wal.bytesNoFpi),
    relations: perUnit(wal.relations, units),
    kinds: perUnit(wal.kinds, units),
  };
}

interface WalWindow {
  records: number;
  bytes: number;
  bytesNoFpi: number | null;
  indexEntries: number | null;
  locks: number | null;
  relations: RelationWrites[];
  kinds: RelationWrites[];
}

async function walBetween(client: pg.Client, from: string, to: string): Promise<WalWindow> {
  const bytes = Number(
    (await client.query<{ b: string }>('SELECT pg_wal_lsn_diff($2, $1)::bigint AS b', [from, to]))
      .rows[0]!.b,
  );
  try {
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const { rows } = await client.query<{ kind: string; n: string; size: string; fpi: string }>(
      `SELECT "resource_manager/record_type" AS kind, count AS n,
              record_size AS size, fpi_size AS fpi
         FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true)`,
      [from, to],
    );
    const of = (kinds: string[]) =>
      rows.filter((r) => kinds.includes(r.kind)).reduce((n, r) => n + Number(r.n), 0);
    return {
      records: rows.reduce((n, r) => n + Number(r.n), 0),
      bytes,
      bytesNoFpi: rows.reduce((n, r) => n + Number(r.size), 0),
      indexEntries: of(['Btree/INSERT_LEAF', 'Btree/INSERT_POST']),
      locks: of(['Heap/LOCK', 'Heap2/LOCK_UPDATED']),
      relations: await relationsBetween(client, from, to),
      kinds: rows
        .map((r) => ({ relation: r.kind, records: Number(r.n), bytes: Number(r.size) }))
        .filter((k) => k.records > 0)
        .sort((a, b) => b.bytes - a.bytes),
    };
  } catch {
    const records = Number.NaN;
    const none = { bytesNoFpi: null, indexEntries: null, locks: null, relations: [], kinds: [] };
    return { records, bytes, ...none };
  }
}

/** Which relations the window's records touched (PostgreSQL 16+; empty before). */
async function relationsBetween(
  client: pg.Client,
  from: string,
  to: string,
): Promise<RelationWrites[]> {
  try {
    const { rows } = await client.query<{ relation: string; n: string; bytes: string }>(
      `SELECT coalesce(c.relname, b.relfilenode::text) AS relation,
              count(DISTINCT b.start_lsn) AS n, sum(b.main_data_length + b.block_data_length) AS bytes
         FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, true) b
         LEFT JOIN pg_class c ON c.relfilenode = b.relfilenode
        WHERE b.relforknumber = 0
          AND b.reldatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
          AND (b.resource_manager IN ('Heap', 'Heap2') AND b.record_type IN
                 ('INSERT', 'INSERT+INIT', 'UPDATE', 'HOT_UPDATE', 'DELETE', 'LOCK',
                  'LOCK_UPDATED', 'MULTI_INSERT', 'MULTI_INSERT+INIT', 'UPDATE+INIT',
                  'HOT_UPDATE+INIT')
               OR b.resource_manager = 'Btree' AND b.record_type IN ('INSERT_LEAF', 'INSERT_POST'))
        GROUP BY 1 ORDER BY 2 DESC, 1`,
      [from, to],
    );
    return rows.map((r) => ({
      relation: r.relation,
      records: Number(r.n),
      bytes: Number(r.bytes),
    }));
  } catch {
    return [];
  }
}

function perUnit(rows: RelationWrites[], units: number): RelationWrites[] {
  return rows.map((r) => ({
    relation: r.relation,
    records: r.records / units,
    bytes: r.bytes / units,
  }));
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}
