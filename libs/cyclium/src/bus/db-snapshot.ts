/**
 * A PostgreSQL snapshot as `pg_current_snapshot()::text` prints it (`xmin:xmax:xip,xip,...`):
 * transactions below `xmin` are finished, those at or above `xmax` had not started, and `xip`
 * lists the ones still running in between. Transaction ids are 64-bit (xid8) and kept as decimal
 * strings, so none is ever rounded.
 */
export interface DbSnapshot {
  readonly text: string;
  readonly xmin: string;
  readonly xmax: string;
  readonly xip: readonly string[];
}

export function parseSnapshot(text: string): DbSnapshot {
  const match = /^(\d+):(\d+):([\d,]*)$/.exec(text);
  if (!match) throw new Error(`not a pg_snapshot: ${JSON.stringify(text)}`);
  const [, xmin, xmax, list] = match as unknown as [string, string, string, string];
  return { text, xmin, xmax, xip: list === '' ? [] : list.split(',') };
}
