/**
 * One read shared by every caller within `maxAgeMs` that asks with the same key, so a storm of
 * probes or page refreshes costs one statement. A failed read is shared too, for as long: each
 * caller reads the rejection, and none goes unhandled in between.
 */
export class SharedRead<K, T> {
  private last: { key: K; at: number; read: Promise<T> } | undefined;

  get(key: K, maxAgeMs: number, read: () => Promise<T>): Promise<T> {
    const now = performance.now();
    if (this.last && this.last.key === key && now - this.last.at < maxAgeMs) return this.last.read;
    const fresh = read();
    fresh.catch(() => undefined);
    this.last = { key, at: now, read: fresh };
    return fresh;
  }
}
