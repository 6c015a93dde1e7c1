const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `'30s'`, `'5m'`, `'1h'`, `'1d'`, `'250ms'` or a number of milliseconds; null when unparsable. */
export function parseInterval(value: string | number): number | null {
  if (typeof value === 'number') return Number.isInteger(value) && value > 0 ? value : null;
  const match = /^\s*(\d+)\s*(ms|s|m|h|d)\s*$/.exec(value);
  if (!match) return null;
  const ms = Number(match[1]) * UNITS[match[2]];
  return ms > 0 ? ms : null;
}

/** The start of the wall-clock bucket `at` falls in: the same on every node. */
export function bucketStart(at: number, intervalMs: number): number {
  return Math.floor(at / intervalMs) * intervalMs;
}
